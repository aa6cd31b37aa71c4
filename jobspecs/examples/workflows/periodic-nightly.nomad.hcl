# A periodic batch job (users' guide, "A periodic job"). The parent is a
# template that Nomad never places and gpushare never pins; each child its
# cron (or `nomad job periodic force`) launches carries the gate and is
# placed like any job:
#
#   gpushare job run jobspecs/examples/workflows/periodic-nightly.nomad.hcl
#   nomad job periodic force nightly
job "nightly" {
  type        = "batch"
  datacenters = ["*"]

  periodic {
    crons            = ["0 2 * * *"]
    prohibit_overlap = true
  }

  meta = {
    "gpushare.expected_runtime" = "1m"
  }

  group "g" {
    constraint { # gpushare places each child
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    task "crunch" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo nightly on $CUDA_VISIBLE_DEVICES with $GPUSHARE_FRACTION; sleep 2"]
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
