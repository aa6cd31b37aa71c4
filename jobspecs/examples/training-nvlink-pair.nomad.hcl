# Data-parallel training on two whole GPUs (200 shares). gpushare gives a
# multi-GPU request the best-connected cell free: on a DGX-1 an NV2 pair.
# The named profile comes from Gavel's measured V100 co-location data.
job "train-pair" {
  type        = "service"
  datacenters = ["*"]

  group "trainer" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      "gpushare.profile" = "ResNet-50 (batch size 64)"
    }

    task "train" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo training on $CUDA_VISIBLE_DEVICES; exec sleep 86400"]
      }
      env {
        # the load the task simulates on fixture GPUs (gpushare demo, e2e:
        # devicefn/fixture's GPUSHARE_FIXTURE_LOAD); real GPUs ignore it
        GPUSHARE_FIXTURE_LOAD = "sm=85,mem_util=40,mem_mib=12000,power_w=220"
      }
      resources {
        cpu    = 100
        memory = 128
        device "nvidia/gpushare" {
          count = 200
          constraint {
            attribute = "${device.model}"
            value     = "Tesla V100-SXM2-16GB"
          }
        }
      }
    }
  }
}
