# A service on a quarter of a GPU per replica, updated one allocation at a
# time (users' guide, "Rolling updates" and "Scaling"). Run it, then run it
# again with another release to roll it, or scale it with Nomad:
#
#   gpushare job run jobspecs/examples/workflows/service-rolling.nomad.hcl
#   gpushare job run -var release=2 jobspecs/examples/workflows/service-rolling.nomad.hcl
#   nomad job scale rolling api 3
variable "release" {
  type    = string
  default = "1"
}

job "rolling" {
  type        = "service"
  datacenters = ["*"]

  update {
    max_parallel = 1
  }

  group "api" {
    count = 2

    constraint { # gpushare places this group
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      release = var.release
    }

    task "serve" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo release $NOMAD_META_release on $CUDA_VISIBLE_DEVICES; exec sleep 86400"]
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
}
