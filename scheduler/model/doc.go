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
//
// State keeps Nomad's objects (Nodes, Jobs, Allocs) and one part per
// concern, each a small type that owns its maps:
//
//   - allocIndexes (index.go): Allocs by group and by job, kept in step
//     by setAlloc and dropAlloc;
//   - jobCache (cache.go): each job version's requests, gate and pin
//     records, parsed once (Record, Request, Gated read through it);
//   - priors (prior.go): the last trusted pin of each group in an earlier
//     version of its job (Prior, LearnPrior);
//   - verdicts (unplaced.go): what Nomad's evaluations said of groups it
//     could not place (PutEval, NomadFailed);
//   - deletions (merge.go, State.Gone): the deletions seen in events, so
//     that a relist listed before them brings nothing back;
//   - versions (slim.go): the jobs reduced to the version stored
//     allocations run, one object per version;
//   - changes and touched (changes.go, generation.go): what changed since
//     the last Snapshot and TakeTouched;
//   - live (live.go): the placement snapshot kept in step, with what each
//     node and allocation in it was made from (it keeps its nodes itself).
//
// What only reads the state is a function over it (Attribution, Ended,
// wantsHolds, toHold; FailedForGood reads only an allocation and its job). The service guards the whole state with one lock (its
// cluster.mu): every part is written under it, but for what a pass
// writes while it reads the state without the lock and no one else
// writes it (the service's reading.go): the snapshot (live, changes,
// touched, through Snapshot and TakeTouched), which only that pass
// reads, and jobCache, filled as it is read, which locks itself.
package model
