// Package model is the scheduling service's picture of the cluster as
// Nomad reports it: nodes, jobs and allocations, kept current from the
// event stream and merged with a full listing whenever the stream ends
// (merge.go: a listing never rolls the model back). Nomad is the only source of truth; Snapshot turns the model into
// the placement core's input, with the shares of pinned groups whose
// allocations do not exist yet held back so no decision hands them out
// twice.
package model
