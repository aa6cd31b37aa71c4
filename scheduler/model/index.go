package model

import (
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"

	"github.com/hashicorp/nomad/api"
)

// allocIndexes are the state's indexes of its allocations, kept in step with
// Allocs as allocations are put and dropped (rather than rebuilt after
// each change): by group (groupIndex, what a pass asks of every group;
// nil until first asked for, then kept in step) and by job (byJob, what a
// purge and a changed job look at). Every write to Allocs goes through
// State.setAlloc and State.dropAlloc, which keep it under the service's
// cluster.mu; the index by group is built (groups) by the writer or by
// ForReaders before readers that run together share it.
type allocIndexes struct {
	byGroup *groupIndex
	byJob   map[string]map[string]bool
}

// setAlloc puts a into Allocs and the indexes, in place of the
// allocation of the same ID.
func (s *State) setAlloc(a *api.Allocation) {
	if prev, ok := s.Allocs[a.ID]; ok {
		s.indexes.remove(prev)
	}
	s.Allocs[a.ID] = a
	s.indexes.add(a)
	s.changed.alloc(a.ID)
	s.changed.job(JobKey(a.Namespace, a.JobID)) // whether its pins hold shares (Missing, BatchDone)
}

// dropAlloc removes allocation id from Allocs and the indexes.
func (s *State) dropAlloc(id string) {
	prev, ok := s.Allocs[id]
	if !ok {
		return
	}
	s.indexes.remove(prev)
	delete(s.Allocs, id)
	s.changed.alloc(id)
	s.changed.job(JobKey(prev.Namespace, prev.JobID))
}

// add puts a, the allocation now in Allocs under its ID, into the indexes.
func (x *allocIndexes) add(a *api.Allocation) {
	k := JobKey(a.Namespace, a.JobID)
	if x.byJob == nil {
		x.byJob = map[string]map[string]bool{}
	}
	if x.byJob[k] == nil {
		x.byJob[k] = map[string]bool{}
	}
	x.byJob[k][a.ID] = true
	if x.byGroup != nil {
		x.byGroup.add(a)
	}
}

// remove takes a, as it was put, out of the indexes.
func (x *allocIndexes) remove(a *api.Allocation) {
	k := JobKey(a.Namespace, a.JobID)
	if ids := x.byJob[k]; ids != nil {
		delete(ids, a.ID)
		if len(ids) == 0 {
			delete(x.byJob, k)
		}
	}
	if x.byGroup != nil {
		x.byGroup.remove(a)
	}
}

// ofJob lists the IDs of the allocations of job key, sorted.
func (x *allocIndexes) ofJob(key string) []string {
	ids := make([]string, 0, len(x.byJob[key]))
	for id := range x.byJob[key] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// groups returns the index of allocs by group, built the first time it
// is asked for (from allocs, the state's Allocs) and then kept in step.
func (x *allocIndexes) groups(allocs map[string]*api.Allocation) *groupIndex {
	if x.byGroup != nil {
		return x.byGroup
	}
	idx := &groupIndex{live: map[decide.Key][]*api.Allocation{}, all: map[decide.Key][]*api.Allocation{}}
	for _, id := range slices.Sorted(maps.Keys(allocs)) {
		a := allocs[id]
		k := AllocKey(a)
		if Live(a) {
			idx.live[k] = append(idx.live[k], a)
		}
		idx.all[k] = append(idx.all[k], a)
	}
	x.byGroup = idx
	return idx
}

// groupIndex is Allocs by group: the live ones, and all of them.
type groupIndex struct {
	live map[decide.Key][]*api.Allocation
	all  map[decide.Key][]*api.Allocation
}

// add puts a into its group's lists, kept sorted by ID. The lists are
// copied, never changed in place: a caller may still hold the old one.
func (idx *groupIndex) add(a *api.Allocation) {
	k := AllocKey(a)
	idx.all[k] = inserted(idx.all[k], a)
	if Live(a) {
		idx.live[k] = inserted(idx.live[k], a)
	}
}

// remove takes allocation a's ID out of its group's lists.
func (idx *groupIndex) remove(a *api.Allocation) {
	k := AllocKey(a)
	for _, m := range []map[decide.Key][]*api.Allocation{idx.all, idx.live} {
		list := m[k]
		i := slices.IndexFunc(list, func(b *api.Allocation) bool { return b.ID == a.ID })
		if i < 0 {
			continue
		}
		if len(list) == 1 {
			delete(m, k)
			continue
		}
		m[k] = slices.Delete(slices.Clone(list), i, i+1)
	}
}

// inserted is list with a in its place by ID.
func inserted(list []*api.Allocation, a *api.Allocation) []*api.Allocation {
	i, _ := slices.BinarySearchFunc(list, a.ID, func(b *api.Allocation, id string) int { return strings.Compare(b.ID, id) })
	return slices.Insert(slices.Clip(list), i, a)
}
