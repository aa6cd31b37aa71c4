# Nomad ACL policy of the gpushare scheduler (`gpushare scheduler`): what
# it needs, and nothing more, on Nomad 1.11.
#
#   nomad acl policy apply -description "gpushare scheduler" \
#     gpushare-scheduler deploy/nomad/gpushare-scheduler.policy.hcl
#   nomad acl token create -name gpushare-scheduler-host -policy gpushare-scheduler
#
# (that token for a scheduler run outside Nomad; the Nomad job stores its
# own, gpushare-scheduler-job, in its variable: gpushare-scheduler.nomad.hcl)
#
# Every namespace, even with nomad.namespaces set to a few: the scheduler
# subscribes to the event stream of all namespaces ("*"), which Nomad allows
# only with read-job in each, and the allocations of every namespace hold
# shares.
namespace "*" {
  capabilities = [
    # list the jobs of the managed namespaces (GET /v1/jobs)
    "list-jobs",
    # read a job in full (GET /v1/job/:id); list and read allocations
    # (GET /v1/allocations?resources=true, /v1/allocation/:id); the Job,
    # Allocation and Deployment topics of the event stream
    "read-job",
    # re-register a gated job with its pin, or gate a preempted job again
    # (PUT /v1/jobs with EnforceIndex); register the short-lived hold jobs
    # of a staged placement, and register them again stopped to let go. The fine-grained part of submit-job:
    # no deregister, purge, revert or dispatch. A gated job that
    # mounts host or CSI volumes needs the volume capabilities too
    # (host_volume "..." { policy = "write" }, csi-mount-volume), since
    # Nomad checks them on every registration.
    "register-job",
    # grow and shrink elastic groups (gpushare.elastic) through the scale
    # API (PUT /v1/job/:id/scale, with the job's modify index); their
    # scaling events are read with read-job (GET /v1/job/:id/scale)
    "scale-job",
    # stop the allocations of an opportunistic job preempted for a
    # guaranteed one (POST /v1/allocation/:id/stop)
    "alloc-lifecycle",
  ]
}

# The same capabilities again: a namespace block that names a namespace
# replaces "*" for it (Nomad does not merge the two), and the leader lock
# and the scheduler's records (its signing key among them) live in its own
# namespace, "gpushare": the shipped job runs there, a scheduler run
# outside Nomad says so with nomad { namespace = "gpushare" }. A namespace
# of its own, which ordinary submitters cannot write to, keeps them from
# reading its token (nomad/jobs/gpushare-scheduler) and signing key.
# Create it first: docs/operators.md, "ACLs and TLS" (from a specification
# file: `nomad namespace apply gpushare` parses a file named gpushare if the
# directory has one, such as the gpushare binary).
namespace "gpushare" {
  capabilities = ["list-jobs", "read-job", "register-job", "scale-job", "alloc-lifecycle"]

  variables {
    # the leader lock (leader.variable_path, default gpushare/leader):
    # acquire, renew and release (PUT /v1/var/:path?lock-*) are "write";
    # the scheduler's records under gpushare/state/ (the key it signs its
    # placements with, pending reasons, learned profiles, preemptions, introspection,
    # submit times; each kind split by size into <kind>, <kind>-01, ...): "read" by every
    # replica, "write" by the leader, "destroy" when a record empties
    # (Nomad's "read" includes listing). Nothing outside gpushare/.
    path "gpushare/*" {
      capabilities = ["read", "write", "destroy"]
    }
  }
}

node {
  # list and read nodes with their devices (GET /v1/nodes, /v1/node/:id),
  # the Node topic of the event stream, and the device stats of each
  # client (GET /v1/client/stats?node_id=...)
  policy = "read"
}
