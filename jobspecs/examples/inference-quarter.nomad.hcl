# Two inference replicas, each on a quarter of a GPU (25 of 100 shares).
# Production class: gpushare never pairs it where its predicted slowdown
# exceeds the bound (10% by default). The declared profile says how hard it
# drives the GPU's SMs and memory bandwidth (0..1).
job "inference" {
  type        = "service"
  datacenters = ["*"]

  group "api" {
    count = 2

    constraint { # gpushare places this group
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    meta = {
      "gpushare.class"   = "production"
      "gpushare.sm_util" = "0.30"
      "gpushare.mem_bw"  = "0.20"
    }

    task "serve" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo serving on $CUDA_VISIBLE_DEVICES with $GPUSHARE_FRACTION of a GPU; exec sleep 86400"]
      }
      env {
        # the load the task simulates on fixture GPUs (gpushare demo, e2e:
        # devicefn/fixture's GPUSHARE_FIXTURE_LOAD); real GPUs ignore it
        GPUSHARE_FIXTURE_LOAD = "sm=30,mem_util=20,mem_mib=3000,power_w=70"
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
