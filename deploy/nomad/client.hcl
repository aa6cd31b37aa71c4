# Nomad agent configuration for a GPU client with gpushare's device plugin.
# See docs/operators.md, "Installing the device plugin".
#
# Install it beside the agent's other configuration (for example as
# /etc/nomad.d/client.hcl: nomad agent -config /etc/nomad.d loads every file
# there), set servers and datacenter, then:
#
#   install -m 0755 nomad-device-gpushare /opt/nomad/data/plugins/
#   systemctl restart nomad
#   nomad node status -self -verbose | grep gpushare   # the device attributes
#
# The agent must run as root: the plugin writes root-owned limit files for
# the interposer, and the exec driver needs root.

datacenter = "dc1"
data_dir   = "/opt/nomad/data"

# Where Nomad looks for plugin binaries (the default is <data_dir>/plugins).
# Keep only plugins in it: nomad-device-gpushare, not gpushare nor
# libgpushare-cuda.so (mode 0644, in /usr/local/lib/gpushare/, below). Nomad
# loads the executables a plugin block names and warns about every other.
plugin_dir = "/opt/nomad/data/plugins"

client {
  enabled = true
  servers = ["nomad-server.example.com:4647"] # or server_join { retry_join = [...] }

  options = {
    # Cloud VMs: at start Nomad's cloud fingerprinters query the metadata
    # service of AWS, GCE, Azure and DigitalOcean. On a VM where such a
    # request fails in a way the fingerprinter does not expect (an AWS
    # setting in the agent's environment it cannot use, such as an
    # AWS_CA_BUNDLE, or a metadata service that answers in part), the agent
    # stops at start; where none answers, each probe waits for its timeout.
    # Denying them costs only the attributes they set (platform.aws.*,
    # platform.gce.*, ...): keep the one of your cloud if jobs constrain on
    # its attributes and it works there.
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

# gpushare's device plugin. Every option, with its default; invalid values
# stop the agent with a message naming each bad field.
plugin "nomad-device-gpushare" {
  config {
    # false: the plugin reports no devices
    enabled = true

    # instances per GPU, 1..1000; 100 => 1 share = 1% of a GPU's SMs and
    # memory. Every client of a cluster should use the same value.
    shares_per_gpu = 100

    # "mps" (the node runs the MPS control daemon, nvidia-cuda-mps-control
    # -d; tasks get CUDA_MPS_* limits for their fraction), "timeslice" (CUDA
    # time-slices the contexts) or "exclusive" (whole GPUs only)
    sharing = "mps"

    # where the node's MPS control daemon keeps its pipes and logs; mounted
    # into tasks when sharing = "mps"
    mps {
      pipe_directory = "/tmp/nvidia-mps"
      log_directory  = "/var/log/nvidia-mps"
    }

    # the CUDA interposer, which holds each task to its share's GPU memory
    # (docs/operators.md, "What holds a task to its share"); off by default
    interposer {
      enabled   = false
      library   = "/usr/local/lib/gpushare/libgpushare-cuda.so" # from the release archive
      state_dir = "/var/lib/gpushare/reservations"              # one root-owned directory per reservation
      gc_after  = "168h"                                        # directories unused this long are removed
    }

    # the path of a fixture file (fixtures/ in the release archive): serve
    # these GPUs instead of NVML's, to try gpushare on a machine without GPUs
    fixture = ""

    # GPU UUIDs never offered (GPUs kept for other uses); MIG device UUIDs
    # (MIG-...) leave out single MIG instances
    ignored_gpu_ids = []

    # how often GPUs, links and health are read again
    fingerprint_period = "1m"

    # MIG layouts by GPU model (empty: the plugin leaves MIG instances as
    # they are). On every MIG-enabled GPU of a listed model that runs no
    # process, the plugin makes the instances these profiles; busy GPUs are
    # left until they are idle. It never turns MIG mode on (that resets
    # the GPU: nvidia-smi -i <gpu> -mig 1). For example:
    #   "NVIDIA A100-SXM4-40GB" = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
    mig {
    }

    # how MIG instances are offered: "whole" (each instance whole, as
    # nvidia/gpushare-mig/<profile>: count = 1 is one instance) or "shared"
    # (each instance as shares of nvidia/gpushare, in a group named
    # "<model> MIG <profile>"; a share stays 1/shares_per_gpu of the parent
    # GPU, so a 3g of an A100 offers 42 shares, and MPS or the interposer
    # hold each task to its shares within the instance). For example:
    #   mig_instances = "shared"
    mig_instances = "whole"

    # How whole GPUs are grouped for Nomad: "model" (default) offers one
    # device group per GPU model on the node (nvidia/gpushare/<model>);
    # "gpu" offers each GPU as its own group, named "<model> GPU <index>",
    # so Nomad takes each request of up to one GPU from one GPU and places
    # the allocations of a group independently (docs/device-contract.md,
    # "One group per GPU"). With "gpu", a job that names the model selects
    # it with a constraint on ${device.attr.model} instead.
    device_groups = "model"
  }
}

# The task drivers of the examples (jobspecs/examples/). exec is on by
# default when the agent runs as root with cgroups. docker needs Docker and,
# for GPUs, the NVIDIA Container Toolkit with its runtime registered with
# Docker (nvidia-ctk runtime configure --runtime=docker): the plugin's
# Reserve sets NVIDIA_VISIBLE_DEVICES, and Nomad's docker driver then runs
# the container with nvidia_runtime. These are the driver's defaults.
plugin "docker" {
  config {
    nvidia_runtime = "nvidia"
    allow_runtimes = ["runc", "nvidia"]
  }
}
