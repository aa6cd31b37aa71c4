# A notebook on a tenth of a GPU. Opportunistic: it may use idle capacity
# that a virtual cluster guarantees to someone else, and is preempted (and
# placed again later) when the owner needs it back.
job "notebook" {
  type        = "service"
  datacenters = ["*"]

  group "jupyter" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      "gpushare.class" = "opportunistic"
    }

    task "lab" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo notebook on $CUDA_VISIBLE_DEVICES; exec sleep 86400"]
      }
      env {
        # the load the task simulates on fixture GPUs (gpushare demo, e2e:
        # devicefn/fixture's GPUSHARE_FIXTURE_LOAD); real GPUs ignore it
        GPUSHARE_FIXTURE_LOAD = "sm=15,mem_util=10,mem_mib=1500,power_w=25"
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = 10
        }
      }
    }
  }
}
