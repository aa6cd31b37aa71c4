# A parameterized batch job (users' guide, "Dispatching a parameterized
# job"). Nomad refuses every registration of a dispatched child, so
# gpushare pins this parent to a pool of GPUs (a quarter of a GPU on each
# node its rules allow) and Nomad places each child inside it. Dispatch
# once `gpushare job status infer` says the parent is pinned to its pool:
#
#   gpushare job run jobspecs/examples/workflows/dispatch-infer.nomad.hcl
#   nomad job dispatch -meta input=batch-1 infer
job "infer" {
  type        = "batch"
  datacenters = ["*"]

  parameterized {
    meta_required = ["input"]
  }

  group "g" {
    constraint { # gpushare pins the parent to a pool
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    task "infer" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo inferring $NOMAD_META_input on $CUDA_VISIBLE_DEVICES; sleep 2"]
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
