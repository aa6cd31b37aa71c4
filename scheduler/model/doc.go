// Package model is the scheduling service's picture of the cluster as
// Nomad reports it: nodes, jobs and allocations, kept current from the
// event stream and merged with a full listing whenever the stream ends
// (merge.go: a listing never rolls the model back). Nomad is the only
// source of truth.
//
// Snapshot turns the model into the placement core's input and keeps that
// snapshot between passes, with the GPUs the plugin reports unhealthy
// marked down, the allocations of every namespace holding their shares,
// and the shares of pinned groups whose allocations do not exist yet held
// back so no decision hands them out twice (as are, through HoldStaged,
// those of a group whose pin waits for the holds that stage it). The state records what
// changed since the last Snapshot (changes.go: the nodes, allocations and
// jobs put or deleted), and Snapshot looks again only at those
// (incremental.go, live.go), never walking the whole cluster unless what
// every allocation is read from changed; State.Rebuild walks it whole, and
// a test checks the two agree after random changes. Allocations are
// indexed by group and by job, kept in step as they are put (index.go),
// and each job version's requests, gate and pin records are parsed once
// (cache.go).
//
// The model's truth is Nomad: a missed event is repaired by the next
// relist (Relist puts and deletes through the same paths, which record
// what they change).
package model
