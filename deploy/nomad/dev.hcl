# A one-machine Nomad dev agent (server and client in one process, state in
# memory) with gpushare's device plugin serving a fixture: GPUs described in
# a file, so it runs on any Linux machine, with or without GPUs. From the
# unpacked release archive (the fixture path below is relative to the
# directory the agent starts in; the plugin inherits it):
#
#   mkdir -p plugins && cp nomad-device-gpushare plugins/
#   nomad agent -dev -config deploy/nomad/dev.hcl -plugin-dir "$PWD/plugins"
#
# then, in another terminal:
#
#   ./gpushare scheduler &                    # Nomad at 127.0.0.1:4646
#   ./gpushare job run jobspecs/examples/training-nvlink-pair.nomad.hcl   # 2 GPUs, an NVLink pair
#   ./gpushare status
#
# gpushare demo does all of this with three clients, and stops when done.
# On a machine with GPUs, set fixture = "" to serve them through NVML.
#
# The plugin directory holds only the plugin (Nomad warns about every
# executable file there that no plugin block names, such as gpushare).

client {
  options = {
    # Cloud VMs: at start Nomad's cloud fingerprinters query the metadata
    # service of AWS, GCE, Azure and DigitalOcean; on a VM where such a
    # request fails in a way the fingerprinter does not expect (an AWS
    # setting in the environment it cannot use, such as an AWS_CA_BUNDLE),
    # the dev agent stops at start. A dev agent needs none of their
    # attributes. deploy/nomad/client.hcl says more.
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "nomad-device-gpushare" {
  config {
    fixture = "fixtures/dgx1-v100.hcl" # 8 x V100 in a hybrid cube-mesh
    sharing = "timeslice"              # no MPS control daemon here
  }
}
