# The gpushare scheduler as a Nomad job: two replicas that elect a leader
# through the Nomad Variable lock (leader.variable_path); only the leader
# pins. See docs/operators.md, "Running the scheduler on Nomad".
#
# On a cluster with ACLs, store the scheduler's token (made with
# deploy/nomad/gpushare-scheduler.policy.hcl) in the job's own variable,
# which the template reads through the job's workload identity:
#
#   # first the namespace and the policy: docs/operators.md, "ACLs and TLS"
#   nomad var put -out none -namespace gpushare nomad/jobs/gpushare-scheduler \
#     token="$(nomad acl token create -name gpushare-scheduler-job -policy gpushare-scheduler -json | jq -r .SecretID)"
#   nomad job run -var nomad_addr=http://10.0.0.1:4646 deploy/nomad/gpushare-scheduler.nomad.hcl
#
# Without ACLs, skip the variable: the token file is then empty and the
# scheduler sends no token.
#
# The job asks for no gpushare device and carries no gate constraint: Nomad
# places it like any service (the scheduler cannot place itself).

variable "gpushare_bin" {
  type        = string
  default     = "/usr/local/bin/gpushare"
  description = "Path of the gpushare binary on the clients (raw_exec and exec run it from the host)."
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Address the scheduler reaches Nomad at, from the client that runs it (a local agent, or the servers)."
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "namespace" {
  type        = string
  default     = "gpushare"
  description = "The job's namespace, which is the scheduler's (the leader lock and gpushare/state/, its signing key among them, live there; the policy's named namespace block must match). A namespace of its own, which ordinary submitters cannot write to: whoever may register a job named gpushare-scheduler in it, or alloc exec into it, can read its token. Create it first: docs/operators.md, ACLs and TLS."
}

variable "count" {
  type        = number
  default     = 2
  description = "Replicas; one leads, the others wait to take over."
}

variable "distinct_hosts" {
  type        = bool
  default     = false
  description = "Require the replicas on different clients (a replica then waits while fewer clients than count can run one). By default they are spread over the clients and share one when there is only one."
}

variable "policy" {
  type    = string
  default = "gpushare"
}

variable "log_level" {
  type    = string
  default = "info"
}

variable "leader_ttl" {
  type    = string
  default = "15s"
}

variable "leader_lock_delay" {
  type    = string
  default = "5s"
}

variable "token_variable" {
  type        = string
  default     = "nomad/jobs/gpushare-scheduler"
  description = "Nomad Variable (in the job's namespace) whose item \"token\" is the scheduler's ACL token. The job's workload identity may read nomad/jobs/<job id>; another path needs a policy attached to the job."
}

variable "extra_config" {
  type        = string
  default     = ""
  description = "More scheduler configuration (HCL), appended as is: virtual_cluster, profile, typical_request blocks, ... (not a second nomad block: Nomad TLS settings go in the job's nomad block)"
}

# CPU (MHz) of the scheduler. A decision pass runs on one core; at thousands of
# nodes its read (the changed jobs' holds and groups, the pins' confirmation),
# the undoing of the step's trial placements and the pins it sends use every
# core it has, so a large cluster's scheduler wants two cores' worth (make bench
# measures a pass at 10,000 nodes on two).
variable "cpu" {
  type    = number
  default = 500
}

# Memory (MiB) of the scheduler. 256 is ample for a few hundred nodes; a pass at
# 10,000 nodes, 100,000 allocations and 20,000 waiting groups keeps about 1.2 GiB
# live and fits in 2 GiB under a soft limit (make bench). Where the task's cgroup
# carries this limit, the scheduler gives the Go runtime 90% of it (memory_limit).
variable "memory" {
  type    = number
  default = 256
}

job "gpushare-scheduler" {
  type        = "service"
  datacenters = var.datacenters
  namespace   = var.namespace

  group "scheduler" {
    count = var.count

    # spread over the clients (a leader and a replica ready to take over
    # on another machine), both on the one client of a one-client cluster
    spread {
      attribute = "${node.unique.id}"
      weight    = 100
    }

    constraint {
      operator = "distinct_hosts"
      value    = var.distinct_hosts ? "true" : "false"
    }

    network {
      port "http" {}
    }

    # Nomad's own service discovery: `gpushare status` and `gpushare job
    # status` find the scheduler through it when neither -scheduler nor
    # GPUSHARE_ADDR is given (they prefer the replica that leads). The check
    # passes once a replica has read the cluster (/v1/health: 503 while
    # starting).
    service {
      name     = "gpushare-scheduler"
      provider = "nomad"
      port     = "http"

      check {
        type     = "http"
        path     = "/v1/health"
        interval = "5s"
        timeout  = "2s"
      }
    }

    # a replica that exits is restarted in place; while it is down another
    # one leads (after the lock's ttl and lock_delay when it held the lock)
    restart {
      attempts = 10
      interval = "5m"
      delay    = "5s"
      mode     = "delay"
    }

    update {
      max_parallel     = 1
      min_healthy_time = "5s"
      healthy_deadline = "2m"
    }

    task "scheduler" {
      driver = "raw_exec"

      config {
        command = var.gpushare_bin
        args    = ["scheduler", "-config", "${NOMAD_TASK_DIR}/scheduler.hcl"]
      }

      # The exec driver (isolated, the binary must be inside the chroot, e.g.
      # fetched with an artifact block into local/):
      #
      # driver = "exec"
      # config {
      #   command = "local/gpushare"
      #   args    = ["scheduler", "-config", "${NOMAD_TASK_DIR}/scheduler.hcl"]
      # }
      #
      # Docker (an image holding the gpushare binary; bridge networking
      # maps the dynamic port, so listen on all addresses inside):
      #
      # driver = "docker"
      # config {
      #   image = "registry.example.com/gpushare:latest"
      #   args  = ["scheduler", "-config", "/local/scheduler.hcl"]
      #   ports = ["http"]
      # }
      # (and http_address = "0.0.0.0:{{ env "NOMAD_PORT_http" }}" below)

      # the token, from the job's variable; empty when the variable does not
      # exist (no ACLs). A new token in the variable restarts the task.
      template {
        destination = "${NOMAD_SECRETS_DIR}/nomad-token"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{- if nomadVarExists "${var.token_variable}" }}{{ with nomadVar "${var.token_variable}" }}{{ .token }}{{ end }}{{ end -}}
        EOT
      }

      template {
        destination = "${NOMAD_TASK_DIR}/scheduler.hcl"
        change_mode = "restart"
        data        = <<-EOT
          nomad {
            address    = "${var.nomad_addr}"
            token_file = "{{ env "NOMAD_SECRETS_DIR" }}/nomad-token"
          }
          policy       = "${var.policy}"
          http_address = "{{ env "NOMAD_ADDR_http" }}"
          log_level    = "${var.log_level}"
          leader {
            ttl        = "${var.leader_ttl}"
            lock_delay = "${var.leader_lock_delay}"
          }
          ${var.extra_config}
        EOT
      }

      resources {
        cpu    = var.cpu
        memory = var.memory
      }
    }
  }
}
