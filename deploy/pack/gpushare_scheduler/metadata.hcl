# The gpushare scheduler as a nomad-pack pack (registry layout: metadata.hcl,
# variables.hcl, templates/). See README.md beside this file.

app {
  url = "https://github.com/gpushare/gpushare"
}

pack {
  name        = "gpushare_scheduler"
  description = "The gpushare scheduler (fractional GPU placement for Nomad) as a service job: replicas that elect a leader through a Nomad Variable lock; only the leader pins."
  version     = "0.1.0"
}
