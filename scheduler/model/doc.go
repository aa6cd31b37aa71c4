// Package model is the scheduling service's picture of the cluster as
// Nomad reports it: nodes, jobs and allocations, kept current from the
// event stream and merged with a full listing whenever the stream ends
// (merge.go: a listing never rolls the model back). Nomad is the only
// source of truth.
//
// Snapshot turns the model into the placement core's input and keeps that
// snapshot between passes, changing only the nodes and allocations Nomad
// reported anew (live.go), with the GPUs the plugin reports unhealthy
// marked down, the allocations of every namespace holding their shares,
// and the shares of pinned groups whose allocations do not exist yet held
// back so no decision hands them out twice. Allocations are indexed by
// group, and each job version's requests and pin records are parsed once
// (cache.go).
package model
