// Package decide is gpushare's one scheduling step, shared by the service
// and the simulator in the style of etcd raft's Ready: Step takes the
// cluster (a placement snapshot with GPU health, allocations and the holds
// of pinned groups), the waiting groups, the expected ends of what runs,
// the time and the configuration, and returns the actions to carry out —
// pin, re-pin, preempt, reserve, refuse for good, or wait with a reason and
// a place in the queue. It has no I/O, no goroutines and no clock, and it
// leaves the snapshot as it found it (StepThenRestore hands that last part
// to the caller, which puts the snapshot back beside what it does with the
// actions).
//
// The scheduling service executes the actions against Nomad; the Gavel
// simulator's gpushare policy executes them on its simulated cluster. The
// queue order (guaranteed tenants first, then the highest response ratio),
// reservations with backfilling, preemption and refusals live here and
// nowhere else.
//
// A "declared" run time, throughout, is a request's Expected: the
// service fills it from the group's gpushare.expected_runtime or, when the
// group declares none, from its family's finished runs
// (placement.Request.LearnedFrom; model/runs.go). The step treats the two
// alike, and says which it ordered a waiting group by.
package decide
