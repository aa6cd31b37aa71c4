# A production service on fixture GPUs that simulates its GPU work for
# introspection: the fixture reports its processes' SM utilisation as
# fixture_sm_util alone, and 40% of that next to a job named in slow_with.
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
variable "fixture_sm_util" {
  type    = string
  default = "50"
}
variable "slow_with" {
  type    = string
  default = ""
}

job "introspect" {
  type        = "service"
  datacenters = ["*"]

  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      "gpushare.class"   = var.class
      "gpushare.sm_util" = var.sm_util
      "gpushare.mem_bw"  = var.mem_bw
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
      env {
        GPUSHARE_FIXTURE_SM_UTIL   = var.fixture_sm_util
        GPUSHARE_FIXTURE_SLOW_WITH = var.slow_with
      }
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
