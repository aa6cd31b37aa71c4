// Package lifecycle is the group lifecycle reconciler: a pure function
// from what Nomad reports of one job group (its current version, its
// allocations of every version, the pin it carries and what Nomad's last
// evaluation said) to where the group stands in the life Nomad gives a
// job — a template, waiting at the gate, pinned but unplaced, running,
// scaling, canarying, migrating, done — and the one thing gpushare must
// do for it. It has no I/O and no clock, and keeps no state: the service
// reads the facts each pass from its model of Nomad and the records in
// Nomad Variables, and executes the answer.
//
// It follows Nomad's own reconciler (scheduler/reconciler in Nomad's
// source) where the two meet: terminal allocations of older versions of
// a batch job are ignored, a completed one of its current version is one
// of its count, and so is a failed one Nomad will not reschedule (its
// attempts used up: the group is done once all of its count completed or
// failed for good, and Nomad places the rest meanwhile, rescheduling a
// failed one with attempts left), canaries run beside the allocations they
// replace, and a destructive update stops an old allocation in the plan
// that places its replacement.
package lifecycle
