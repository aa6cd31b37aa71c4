# A short batch job on half a GPU.
job "batch-half" {
  type        = "batch"
  datacenters = ["*"]

  meta = {
    # served ahead of longer jobs that have waited about as long (response ratio)
    "gpushare.expected_runtime" = "1m"
  }

  group "work" {
    constraint {
      attribute = "${node.unique.id}"
      value     = "gpushare:pending"
    }

    task "crunch" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo crunching on $CUDA_VISIBLE_DEVICES with $GPUSHARE_FRACTION; sleep 2"]
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = 50
        }
      }
    }
  }
}
