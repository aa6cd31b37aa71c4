# The gpushare scheduler as a Nomad job, rendered by nomad-pack from the
# gpushare_scheduler pack (the job of deploy/nomad/gpushare-scheduler.nomad.hcl):
# replicas that elect a leader through the Nomad Variable lock
# (leader.variable_path); only the leader pins. The job asks for no gpushare
# device and carries no gate constraint: Nomad places it like any service.
job [[ template "job_name" . ]] {
  type        = "service"
  [[- template "region" . ]]
  datacenters = [[ var "datacenters" . | toStringList ]]
  namespace   = [[ var "namespace" . | quote ]]
  [[- template "node_pool" . ]]

  group "scheduler" {
    count = [[ var "count" . ]]

    spread {
      attribute = "${node.unique.id}"
      weight    = 100
    }

    constraint {
      operator = "distinct_hosts"
      value    = "[[ var "distinct_hosts" . ]]"
    }

    network {
      port "http" {
        [[- if gt (var "http_port" .) 0 ]]
        static = [[ var "http_port" . ]]
        [[- end ]]
      }
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
      driver = [[ var "driver" . | quote ]]

      config {
        command = [[ var "gpushare_bin" . | quote ]]
        args    = ["scheduler", "-config", "${NOMAD_TASK_DIR}/scheduler.hcl"]
      }

      # the token, from the job's variable; empty when the variable does not
      # exist (no ACLs). A new token in the variable restarts the task.
      template {
        destination = "${NOMAD_SECRETS_DIR}/nomad-token"
        perms       = "0600"
        change_mode = "restart"
        data        = <<-EOT
          {{- if nomadVarExists "[[ template "token_variable" . ]]" }}{{ with nomadVar "[[ template "token_variable" . ]]" }}{{ .token }}{{ end }}{{ end -}}
        EOT
      }

      template {
        destination = "${NOMAD_TASK_DIR}/scheduler.hcl"
        change_mode = "restart"
        data        = <<-EOT
          nomad {
            address    = [[ var "nomad_addr" . | quote ]]
            token_file = "{{ env "NOMAD_SECRETS_DIR" }}/nomad-token"
            [[- if var "nomad_config" . ]]
[[ var "nomad_config" . | trimSuffix "\n" | replace "${" "$${" | replace "%{" "%%{" | indent 12 ]]
            [[- end ]]
          }
          policy       = [[ var "policy" . | quote ]]
          http_address = "{{ env "NOMAD_ADDR_http" }}"
          log_level    = [[ var "log_level" . | quote ]]
          leader {
            ttl        = [[ var "leader_ttl" . | quote ]]
            lock_delay = [[ var "leader_lock_delay" . | quote ]]
          }
          [[- if var "extra_config" . ]]
[[ var "extra_config" . | trimSuffix "\n" | replace "${" "$${" | replace "%{" "%%{" | indent 10 ]]
          [[- end ]]
        EOT
      }

      resources {
        cpu    = [[ (var "resources" .).cpu ]]
        memory = [[ (var "resources" .).memory ]]
      }
    }
  }
}
