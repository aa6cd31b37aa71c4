// Package model is the scheduling service's picture of the cluster as
// Nomad reports it: nodes, jobs and allocations, kept current from the
// event stream and rebuilt from a full listing whenever the stream cannot
// resume. Nomad is the only source of truth; Snapshot turns the model into
// the placement core's input, with the shares of pinned groups whose
// allocations do not exist yet held back so no decision hands them out
// twice.
package model
