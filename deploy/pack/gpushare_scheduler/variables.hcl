# Variables of the gpushare_scheduler pack. The defaults render the job of
# deploy/nomad/gpushare-scheduler.nomad.hcl run with its own defaults.

variable "job_name" {
  description = "The job's name (its ID). The CLI finds the scheduler through the Nomad service gpushare-scheduler, whatever the job is called. \"\" uses the pack's name."
  type        = string
  default     = "gpushare-scheduler"
}

variable "region" {
  description = "The region to run the job in; \"\" leaves it to the agent's."
  type        = string
  default     = ""
}

variable "namespace" {
  description = "The job's namespace, which is the scheduler's: the leader lock and gpushare/state/ (its signing key among them) live there, and the ACL policy's named namespace block must name it (templates/gpushare_scheduler.policy.hcl.tpl does). A namespace of its own, which ordinary submitters cannot write to; create it first (templates/gpushare_scheduler.namespace.hcl.tpl)."
  type        = string
  default     = "gpushare"
}

variable "datacenters" {
  description = "Datacenters the replicas may run in."
  type        = list(string)
  default     = ["*"]
}

variable "node_pool" {
  description = "The node pool the replicas run in; \"\" leaves it to the namespace's default."
  type        = string
  default     = ""
}

variable "count" {
  description = "Replicas: one leads, the others wait to take over."
  type        = number
  default     = 2
}

variable "distinct_hosts" {
  description = "Require the replicas on different clients (a replica then waits while fewer clients than count can run one); by default they are spread over the clients and share one when there is only one."
  type        = bool
  default     = false
}

variable "driver" {
  description = "The task driver: raw_exec, or exec (isolated; the binary must be inside its chroot, which holds /usr by default)."
  type        = string
  default     = "raw_exec"
}

variable "gpushare_bin" {
  description = "Path of the gpushare binary on the clients."
  type        = string
  default     = "/usr/local/bin/gpushare"
}

variable "nomad_addr" {
  description = "Address the scheduler reaches Nomad at, from the client that runs it (a local agent, or the servers)."
  type        = string
  default     = "http://127.0.0.1:4646"
}

variable "http_port" {
  description = "The scheduler's HTTP port on its client (the port labelled http); 0 takes a dynamic port."
  type        = number
  default     = 0
}

variable "policy" {
  description = "The scheduler's placement policy (its configuration's policy)."
  type        = string
  default     = "gpushare"
}

variable "log_level" {
  description = "The scheduler's log level: trace, debug, info, warn or error."
  type        = string
  default     = "info"
}

variable "leader_ttl" {
  description = "TTL of the leader lock (leader.ttl)."
  type        = string
  default     = "15s"
}

variable "leader_lock_delay" {
  description = "Lock delay of the leader lock (leader.lock_delay)."
  type        = string
  default     = "5s"
}

variable "token_variable" {
  description = "Nomad Variable (in the job's namespace) whose item \"token\" is the scheduler's ACL token. \"\" is nomad/jobs/<job_name>, which the job's workload identity may read; another path needs a policy attached to the job. Without ACLs the variable need not exist: the token file stays empty and no token is sent."
  type        = string
  default     = ""
}

variable "nomad_config" {
  description = "More of the scheduler configuration's nomad block (HCL), inserted as is: TLS files (ca_cert, client_cert, client_key, tls_server_name), region, namespaces, ..."
  type        = string
  default     = ""
}

variable "extra_config" {
  description = "More scheduler configuration (HCL), appended as is: settings and blocks other than nomad and leader (virtual_cluster, profile, typical_request, resync_interval, ...)."
  type        = string
  default     = ""
}

variable "resources" {
  description = "CPU (MHz) and memory (MiB) of each replica."
  type = object({
    cpu    = number
    memory = number
  })
  default = {
    cpu    = 500
    memory = 256
  }
}
