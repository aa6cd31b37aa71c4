# A service that asks gpushare for GPU shares: the gate constraint hands
# the group to the gpushare scheduler, which pins it (docs/gate-and-pin.md).
variable "shares" {
  type = number
}
variable "model" {
  type    = string
  default = ""
}
variable "class" {
  type    = string
  default = ""
}
variable "sm_util" {
  type    = string
  default = ""
}
variable "mem_bw" {
  type    = string
  default = ""
}
variable "vc" {
  type    = string
  default = ""
}
variable "count" {
  type    = number
  default = 1
}
variable "expected" {
  type        = string
  default     = ""
  description = "gpushare.expected_runtime: how long the job expects to run"
}

job "shares" {
  type        = "service"
  datacenters = ["*"]

  group "g" {
    count = var.count

    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      "gpushare.class"   = var.class
      "gpushare.sm_util" = var.sm_util
      "gpushare.mem_bw"  = var.mem_bw
      "gpushare.vc"      = var.vc

      "gpushare.expected_runtime" = var.expected
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    update {
      min_healthy_time = "1s"
      healthy_deadline = "1m"
    }

    task "work" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(CUDA|NVIDIA|GPUSHARE)_' | sort; exec sleep 3600"]
      }
      resources {
        cpu    = 20
        memory = 16
        device "nvidia/gpushare" {
          count = var.shares
          dynamic "constraint" {
            for_each = var.model == "" ? [] : [var.model]
            content {
              attribute = "${device.model}"
              value     = constraint.value
            }
          }
        }
      }
    }
  }
}
