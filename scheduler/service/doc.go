// Package service is the gpushare scheduling service (DESIGN.md section
// 5): it watches Nomad's event stream, keeps a model of the cluster, asks
// the placement core where each gated task group goes, pins the decision
// into the job, confirms it when the allocation appears, preempts
// opportunistic work for guaranteed tenants, and serves its state over
// HTTP with Prometheus metrics. Replicas elect a leader through a Nomad
// Variable lock; only the leader pins.
package service
