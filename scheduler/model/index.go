package model

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"

	"github.com/hashicorp/nomad/api"
)

// The state's indexes of its allocations, kept in step with Allocs as
// allocations are put and dropped (rather than rebuilt after each
// change): by group (groupIndex, what a pass asks of every group) and
// by job (byJob, what a purge and a changed job look at). Every write to
// Allocs goes through setAlloc and dropAlloc.

// setAlloc puts a into Allocs and the indexes, in place of the
// allocation of the same ID.
func (s *State) setAlloc(a *api.Allocation) {
	if prev, ok := s.Allocs[a.ID]; ok {
		s.unindex(prev)
	}
	s.Allocs[a.ID] = a
	k := JobKey(a.Namespace, a.JobID)
	if s.byJob == nil {
		s.byJob = map[string]map[string]bool{}
	}
	if s.byJob[k] == nil {
		s.byJob[k] = map[string]bool{}
	}
	s.byJob[k][a.ID] = true
	if s.byGroup != nil {
		s.byGroup.add(a)
	}
	s.changed.alloc(a.ID)
	s.changed.job(k) // whether its pins hold shares (Missing, BatchDone)
}

// dropAlloc removes allocation id from Allocs and the indexes.
func (s *State) dropAlloc(id string) {
	prev, ok := s.Allocs[id]
	if !ok {
		return
	}
	s.unindex(prev)
	delete(s.Allocs, id)
	s.changed.alloc(id)
	s.changed.job(JobKey(prev.Namespace, prev.JobID))
}

// unindex removes a, as it was put, from the indexes.
func (s *State) unindex(a *api.Allocation) {
	k := JobKey(a.Namespace, a.JobID)
	if ids := s.byJob[k]; ids != nil {
		delete(ids, a.ID)
		if len(ids) == 0 {
			delete(s.byJob, k)
		}
	}
	if s.byGroup != nil {
		s.byGroup.remove(a)
	}
}

// allocsOfJob lists the IDs of the allocations of job key, sorted.
func (s *State) allocsOfJob(key string) []string {
	ids := make([]string, 0, len(s.byJob[key]))
	for id := range s.byJob[key] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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
