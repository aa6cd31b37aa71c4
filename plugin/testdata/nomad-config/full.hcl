enabled            = true
shares_per_gpu     = 10
sharing            = "mps"
fixture            = "/etc/gpushare/fixture.hcl"
ignored_gpu_ids    = ["GPU-1", "GPU-2"]
fingerprint_period = "5s"
mps {
  pipe_directory = "/run/mps"
}
interposer {
  enabled                      = false
  library                      = "/opt/gpushare/libgpushare-cuda.so"
  state_dir                    = "/var/lib/gs"
  gc_after                     = "24h"
  unified_oversubscription_pct = 250
}
