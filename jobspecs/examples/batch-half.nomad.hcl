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
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    task "crunch" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo crunching on $CUDA_VISIBLE_DEVICES with $GPUSHARE_FRACTION; sleep 2"]
      }
      env {
        # the load the task simulates on fixture GPUs (gpushare demo, e2e:
        # devicefn/fixture's GPUSHARE_FIXTURE_LOAD); real GPUs ignore it
        GPUSHARE_FIXTURE_LOAD = "sm=50,mem_util=25,mem_mib=6000,power_w=120"
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
