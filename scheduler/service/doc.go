// Package service is the gpushare scheduling service: it watches Nomad's
// event stream, keeps a live model of the cluster, and on every pass hands
// the model to the one decision step (package decide) and executes the
// actions it returns against Nomad: pin a group into its job, re-pin one
// whose capacity is gone, preempt opportunistic work for a guaranteed
// tenant, refuse for good a group no node could ever hold, unpair a GPU
// where a production job was observed slower than its bound (live
// introspection of the plugin's per-process SM utilisation, introspect.go),
// or leave a group waiting with its reason. Each group is offered only the
// nodes its job's own rules allow, as Nomad's scheduler would check them
// (package feasible; feasible.go): a group no node passes waits, with
// Nomad's tally of filtered nodes, and holds nothing. It confirms pins when allocations appear and
// serves its state over HTTP with Prometheus metrics. Replicas elect a
// leader through a Nomad Variable lock; only the leader pins.
package service
