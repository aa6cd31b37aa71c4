# A service that asks for one whole MIG instance of a profile. Nomad places
# it by the device name alone (nvidia/gpushare-mig/<profile>): count = 1 is
# one instance. The gpushare scheduler's gate is not needed.
job "mig" {
  type        = "service"
  datacenters = ["*"]

  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
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
        device "nvidia/gpushare-mig/PROFILE" {
          count = 1
        }
      }
    }
  }
}
