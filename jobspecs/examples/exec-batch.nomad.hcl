# A batch job on 30 shares of a GPU with the exec driver: the task runs in
# a chroot of the client's /bin, /lib, /usr, ... (the driver's chroot_env)
# with cgroups, so the client must run as root on Linux with cgroups.
#
# The plugin's Reserve hands the task its GPU through the environment
# (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES: the GPU's UUID; the share in
# GPUSHARE_FRACTION and GPUSHARE_MEMORY_MIB) and the GPU's /dev/nvidia*
# nodes, which the exec driver creates in the chroot. The CUDA libraries come
# from the chroot, so the client's driver libraries (libcuda.so.1) must be
# under a directory the chroot copies (/lib, /usr, ... by default). With the
# plugin's interposer enabled, its library and limits are mounted in too
# (README, "What holds a task to its share").
job "exec-batch" {
  type        = "batch"
  datacenters = ["*"]

  group "work" {
    constraint { # gpushare places this group
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }

    task "crunch" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo crunching on $CUDA_VISIBLE_DEVICES with $GPUSHARE_FRACTION of a GPU; sleep 2"]
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpushare" {
          count = 30
        }
      }
    }
  }
}
