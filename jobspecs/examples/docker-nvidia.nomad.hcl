# A CUDA container on a fifth of a GPU (20 of 100 shares), with the docker
# driver and the NVIDIA container runtime.
#
# What the client needs: Docker with the NVIDIA Container Toolkit, its
# runtime registered with Docker (nvidia-ctk runtime configure
# --runtime=docker, then restart dockerd), and Nomad's docker plugin, whose
# defaults already fit (nvidia_runtime = "nvidia", allow_runtimes = ["runc",
# "nvidia"]).
#
# No runtime is set below: the plugin's Reserve puts NVIDIA_VISIBLE_DEVICES
# (the UUID of the GPU that holds the shares) into the task's environment,
# and Nomad's docker driver then runs the container with its nvidia_runtime
# itself (a task runtime of another name is refused). The runtime reads
# NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES and mounts that GPU
# and the driver's libraries into the container. The share's limits are in
# the environment (GPUSHARE_FRACTION, GPUSHARE_MEMORY_MIB, with MPS the
# CUDA_MPS_* variables); with the plugin's interposer enabled, its library
# and limits are mounted too (README, "What holds a task to its share").
job "cuda-container" {
  type        = "service"
  datacenters = ["*"]

  group "infer" {
    constraint { # gpushare places this group
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    # only clients whose Docker has the NVIDIA runtime
    constraint {
      attribute = "${attr.driver.docker.runtimes}"
      operator  = "set_contains"
      value     = "nvidia"
    }

    meta = {
      "gpushare.class" = "production"
    }

    task "cuda" {
      driver = "docker"
      config {
        image   = "nvidia/cuda:12.4.1-base-ubuntu22.04"
        command = "/bin/sh"
        args    = ["-c", "nvidia-smi -L; echo $GPUSHARE_FRACTION of a GPU, $GPUSHARE_MEMORY_MIB MiB; exec sleep infinity"]
      }
      env {
        # compute: libcuda; utility: nvidia-smi and NVML
        NVIDIA_DRIVER_CAPABILITIES = "compute,utility"
      }
      resources {
        cpu    = 500
        memory = 1024
        device "nvidia/gpushare" {
          count = 20
        }
      }
    }
  }
}
