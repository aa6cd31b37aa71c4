package model

import "github.com/hashicorp/nomad/api"

// touched is what changed since the service last asked (TakeTouched): the
// jobs and nodes put or deleted, whatever the allocations, evaluations,
// earlier pins or learned profiles of a job that marked it, and whether
// everything must be looked at again. Snapshot consumes changes; this is
// kept beside them so that a second reader (the service's pass, which
// reuses what it derived for groups that did not change) sees the same
// marks without taking them from the snapshot.
type touched struct {
	jobs, nodes map[string]bool
	all         bool
}

// add merges what a Snapshot took (c) into t.
func (t *touched) add(c changes) {
	for k := range c.jobs {
		t.jobs = mark(t.jobs, k)
	}
	for id := range c.nodes {
		t.nodes = mark(t.nodes, id)
	}
	t.all = t.all || c.all
}

// Touched is what changed in the state since the last TakeTouched: Jobs
// (by job key) whose version, allocations, evaluations, earlier pins or
// learned profiles changed, or that were deleted; Nodes put or deleted;
// All when what every group is read from changed (the trust in pin
// records, a learned profile whose key names no group).
type Touched struct {
	Jobs, Nodes map[string]bool
	All         bool
}

// TakeTouched returns what changed since the last call and starts afresh,
// both what Snapshot took and what it has not yet taken.
func (s *State) TakeTouched() Touched {
	t := s.changed.seen
	t.add(s.changed)
	s.changed.seen = touched{}
	return Touched{Jobs: t.jobs, Nodes: t.nodes, All: t.all}
}

// Gated is pin.Gated(job), read once per job version (as Pinned reads
// it). The caller does not change the list.
func (s *State) Gated(job *api.Job) []string { return s.gated(job) }
