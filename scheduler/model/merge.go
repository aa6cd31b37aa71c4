package model

import (
	"github.com/hashicorp/nomad/api"
)

// Listing is a full listing of the cluster. Nodes, jobs and allocations
// are listed one after the other, so each kind carries the Nomad index it
// was listed at (the X-Nomad-Index of its list request).
type Listing struct {
	Nodes      []*api.Node
	NodesIndex uint64
	// SameNodes and SameJobs (job keys) were listed with the modify
	// indexes the state holds: unchanged, not read again.
	SameNodes   []string
	Jobs        []*api.Job
	SameJobs    []string
	JobsIndex   uint64
	Allocs      []*api.Allocation
	AllocsIndex uint64
}

// Index is the index the listing as a whole reflects: the lowest of its
// kinds. An event after it may be missing from one of them, so the event
// stream resumes from Index() + 1.
func (l *Listing) Index() uint64 { return min(l.NodesIndex, l.JobsIndex, l.AllocsIndex) }

// RelistStats says what a relist changed.
type RelistStats struct {
	// Kept are objects the listing lacks or holds in an older version
	// that the state keeps because it saw them after the listing.
	Kept int
	// Removed are objects the listing shows gone.
	Removed int
}

// Relist merges a full listing into the state without ever rolling it
// back to an older picture (a listing read from a lagging server, or read
// while events were applied):
//   - a listed object replaces the state's only if its modify index is
//     not older, and only if the state did not see it deleted after that
//     version (Delete*At);
//   - an object the listing lacks is removed only if the listing of its
//     kind is at or above the object's modify index: one created or
//     changed after the listing's snapshot stays.
//
// The index of the state never goes down. Deletions older than the
// listing are forgotten: that listing already shows them.
func (s *State) Relist(l *Listing) RelistStats {
	var st RelistStats
	seen := map[string]bool{}
	for _, n := range l.Nodes {
		if n == nil || n.ID == "" {
			continue
		}
		seen[n.ID] = true
		if s.Gone.after(nodeGone(n.ID), n.ModifyIndex) || newer(s.Nodes[n.ID] != nil, nodeIndex(s.Nodes[n.ID]), n.ModifyIndex) {
			st.Kept++
			continue
		}
		s.PutNode(n)
	}
	for _, id := range l.SameNodes {
		seen[id] = true
	}
	for id, n := range s.Nodes {
		if !seen[id] {
			st.count(n.ModifyIndex <= l.NodesIndex, func() { s.DeleteNode(id) })
		}
	}

	clear(seen)
	for _, j := range l.Jobs {
		if j == nil || j.ID == nil {
			continue
		}
		k := jobKey(j)
		seen[k] = true
		prev := s.Jobs[k]
		if s.Gone.after(jobGone(k), jobIndex(j)) || newer(prev != nil, jobIndex(prev), jobIndex(j)) {
			st.Kept++
			continue
		}
		s.PutJob(j)
	}
	for _, k := range l.SameJobs {
		seen[k] = true
	}
	for k, j := range s.Jobs {
		if !seen[k] {
			st.count(jobIndex(j) <= l.JobsIndex, func() { s.forgetJob(j); delete(s.Jobs, k); s.changed.job(k) })
		}
	}

	clear(seen)
	for _, a := range l.Allocs {
		if a == nil || a.ID == "" {
			continue
		}
		seen[a.ID] = true
		prev := s.Allocs[a.ID]
		if s.Gone.after(allocGone(a.ID), a.ModifyIndex) || s.Gone.after(jobGone(JobKey(a.Namespace, a.JobID)), a.ModifyIndex) ||
			newer(prev != nil, allocIndex(prev), a.ModifyIndex) {
			st.Kept++
			continue
		}
		if prev != nil && allocIndex(prev) == a.ModifyIndex {
			continue // the version the model holds: nothing to merge (a relist of 100,000 allocations stored each again, under the lock)
		}
		s.PutAlloc(a)
	}
	for id, a := range s.Allocs {
		if !seen[id] {
			st.count(a.ModifyIndex <= l.AllocsIndex, func() { s.dropAlloc(id) })
		}
	}

	s.Gone.forgetUpTo(l.Index())
	s.Index = max(s.Index, l.Index())
	return st
}

// DeleteJobAt is DeleteJob for a purge seen at index: a job or allocation
// changed after index stays (a replayed purge after a re-registration),
// and no relist listed before index brings them back.
func (s *State) DeleteJobAt(namespace, id string, index uint64) {
	k := JobKey(namespace, id)
	if j := s.Jobs[k]; j != nil && jobIndex(j) > index {
		return
	}
	s.Gone.note(jobGone(k), index)
	for _, aid := range s.indexes.ofJob(k) {
		if s.Allocs[aid].ModifyIndex <= index {
			s.Gone.note(allocGone(aid), index)
			s.dropAlloc(aid)
		}
	}
	if j := s.Jobs[k]; j != nil {
		s.forgetJob(j)
	}
	delete(s.Jobs, k)
	s.changed.job(k)
}

// DeleteNodeAt is DeleteNode for a deregistration seen at index: a node
// registered again after index stays, and no relist listed before index
// brings it back.
func (s *State) DeleteNodeAt(id string, index uint64) {
	if n := s.Nodes[id]; n != nil && n.ModifyIndex > index {
		return
	}
	s.Gone.note(nodeGone(id), index)
	s.DeleteNode(id)
}

// deletions are the deletions seen in events (Delete*At), by kind and ID
// (nodeGone, jobGone, allocGone), at the index each was seen at: a
// relist listed before that index does not bring the object back, and
// one at or after it shows the deletion already (forgetUpTo). They are
// the state's, written and read by the state's writer (events, relists)
// under the service's cluster.mu.
type deletions map[string]uint64

// note records that the object key was deleted at index.
func (d *deletions) note(key string, index uint64) {
	if *d == nil {
		*d = map[string]uint64{}
	}
	(*d)[key] = max((*d)[key], index)
}

// after reports whether the object key was seen deleted after the
// version modified at index.
func (d deletions) after(key string, index uint64) bool {
	at, ok := d[key]
	return ok && at > index
}

// forgetUpTo forgets the deletions seen at or before index (a listing at
// index already shows them).
func (d deletions) forgetUpTo(index uint64) {
	for k, at := range d {
		if at <= index {
			delete(d, k)
		}
	}
}

// newer reports whether the state holds a version newer than index.
func newer(held bool, have, index uint64) bool { return held && have > index }

func (st *RelistStats) count(remove bool, del func()) {
	if remove {
		del()
		st.Removed++
	} else {
		st.Kept++
	}
}

func nodeGone(id string) string  { return "node/" + id }
func jobGone(key string) string  { return "job/" + key }
func allocGone(id string) string { return "alloc/" + id }

func nodeIndex(n *api.Node) uint64 {
	if n == nil {
		return 0
	}
	return n.ModifyIndex
}

func allocIndex(a *api.Allocation) uint64 {
	if a == nil {
		return 0
	}
	return a.ModifyIndex
}

func jobIndex(j *api.Job) uint64 {
	if j == nil || j.ModifyIndex == nil {
		return 0
	}
	return *j.ModifyIndex
}
