# The gpushare scheduler's configuration for the systemd unit beside it
# (gpushare-scheduler.service runs
# `gpushare scheduler -config /etc/gpushare/scheduler.hcl`). Install it with
#   install -d -m 0755 /etc/gpushare
#   install -m 0644 deploy/systemd/scheduler.hcl /etc/gpushare/
# and check it with
#   gpushare scheduler -check -config /etc/gpushare/scheduler.hcl
# Every option, with its default, is in docs/reference.md ("Scheduler
# configuration"); those below are the ones a host install usually sets.

nomad {
  # where the scheduler reaches Nomad: a local agent, or the servers (with a
  # configuration file, $NOMAD_ADDR is not read: this is the address)
  address = "http://127.0.0.1:4646"

  # the token: NOMAD_TOKEN=... in /etc/gpushare/env (root:root 0600, read by
  # systemd), or a file readable by the gpushare group:
  # token_file = "/etc/gpushare/token"

  # the scheduler's own namespace (leader lock, records): the unit sets
  # NOMAD_NAMESPACE=gpushare, which the shipped ACL policy names; set it here
  # to use another
  # namespace = "gpushare"

  # the namespaces whose jobs it places ("*": every one)
  namespaces = ["*"]

  # over TLS (address = "https://..."), readable by the gpushare group:
  # ca_cert     = "/etc/gpushare/nomad-ca.pem"
  # client_cert = "/etc/gpushare/cli.pem"
  # client_key  = "/etc/gpushare/cli-key.pem"
}

policy = "gpushare"

# the HTTP API, the web page and /metrics; loopback by default. Beyond
# loopback the API asks for a Nomad token (http_require_token), and Prometheus
# must reach /metrics (which stays open)
http_address = "127.0.0.1:8646"

log_level = "info"

# replicas elect a leader through this Nomad Variable lock; run two or more
# on different hosts with the same file
leader {
  variable_path = "gpushare/leader"
  ttl           = "15s"
  lock_delay    = "5s"
}
