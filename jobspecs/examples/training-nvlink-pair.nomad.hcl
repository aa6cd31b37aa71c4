# Data-parallel training on two whole GPUs (200 shares). gpushare gives a
# multi-GPU request the best-connected cell free: on a DGX-1 an NV2 pair.
# The named profile comes from Gavel's measured V100 co-location data.
job "train-pair" {
  type        = "service"
  datacenters = ["*"]

  group "trainer" {
    constraint {
      attribute = "${node.unique.id}"
      value     = "gpushare:pending"
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
