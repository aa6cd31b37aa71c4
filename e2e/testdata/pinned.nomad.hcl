# A batch job pinned to exact gpushare shares: the ${device.ids}
# constraint inside the device block is how the gpushare scheduler pins a
# placement (docs/gate-and-pin.md). The task prints the environment the
# plugin's Reserve gave it.
variable "shares" {
  type = number
}

variable "share_ids" {
  type        = string
  description = "comma-separated share IDs the device request may take"
}

job "pinned" {
  type        = "batch"
  datacenters = ["*"]

  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "show-env" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(CUDA|NVIDIA|GPUSHARE)_' | sort"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpushare" {
          count = var.shares
          constraint {
            attribute = "${device.ids}"
            operator  = "set_contains_any"
            value     = var.share_ids
          }
        }
      }
    }
  }
}
