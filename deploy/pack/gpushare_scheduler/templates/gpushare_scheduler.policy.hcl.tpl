# Nomad ACL policy of the gpushare scheduler, for the namespace
# [[ var "namespace" . | quote ]]: deploy/nomad/gpushare-scheduler.policy.hcl
# (which explains each capability) with its named namespace block naming the
# job's namespace. `nomad-pack render` writes it (an auxiliary file; `run`
# submits only the job):
#
#   nomad acl policy apply -description "gpushare scheduler" \
#     gpushare-scheduler gpushare_scheduler.policy.hcl

# every namespace: the scheduler follows the event stream of all of them
namespace "*" {
  capabilities = ["list-jobs", "read-job", "register-job", "scale-job", "alloc-lifecycle"]
}

# its own namespace (a named block replaces "*" for it): the same, and the
# leader lock and its records under gpushare/ (Nomad Variables)
namespace [[ var "namespace" . | quote ]] {
  capabilities = ["list-jobs", "read-job", "register-job", "scale-job", "alloc-lifecycle"]

  variables {
    path "gpushare/*" {
      capabilities = ["read", "write", "destroy"]
    }
  }
}

node {
  policy = "read"
}
