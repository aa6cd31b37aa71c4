# A service deployed with a canary (users' guide, "Canaries"): a new
# release is pinned to capacity of its own beside the running allocations,
# which keep their shares until the deployment is promoted (here
# automatically, once the canary is healthy):
#
#   gpushare job run jobspecs/examples/workflows/service-canary.nomad.hcl
#   gpushare job run -detach -var release=2 jobspecs/examples/workflows/service-canary.nomad.hcl
#
# (gpushare job run carries a running pin over to a new version only for
# groups deployed without canaries: this group stays gated, and the
# scheduler pins the canary to capacity of its own; docs/users.md,
# "Canaries")
#
# Without auto_promote: nomad deployment promote <deployment id>.
variable "release" {
  type    = string
  default = "1"
}

job "canary" {
  type        = "service"
  datacenters = ["*"]

  update {
    canary           = 1
    auto_promote     = true
    min_healthy_time = "1s"
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
