# A short batch job on half a GPU.
job "batch-half" {
  type        = "batch"
  datacenters = ["*"]

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
