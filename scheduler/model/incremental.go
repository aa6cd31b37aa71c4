package model

import (
	"maps"
	"slices"
)

// syncChanged brings the snapshot up to date with what changed since the
// last Snapshot (ch), looking at nothing else but the allocations it
// left out (retry), the nodes it could not add (badNodes) and, since
// preemptions in flight are not events, whether each allocation is gone:
// the incremental counterpart of syncNodes and syncAllocs, which look at
// everything.
func (s *State) syncChanged(lv *live, ch changes, gone func(string) bool, problems *[]string) {
	look := map[string]bool{} // allocations to look at
	for id := range ch.allocs {
		look[id] = true
	}
	for k := range ch.jobs {
		for id := range s.indexes.byJob[k] {
			look[id] = true // its group's facts may have changed
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ch.nodes)) {
		if _, ok := lv.nodes[id]; ok && !lv.nodeHolds(s.Nodes, id) {
			for _, aid := range lv.dropNode(id, problems) {
				look[aid] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(mergeSets(ch.nodes, lv.badNodes))) {
		lv.addNode(s.Nodes, id, problems)
	}
	if gone != nil {
		for id := range lv.allocs {
			if gone(id) {
				look[id] = true
			}
		}
	}
	for id := range look {
		if m, ok := lv.allocs[id]; ok && !s.allocHolds(lv, id, m, gone) {
			_, _ = lv.snap.Remove(id)
			lv.forget(id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(mergeSets(look, lv.retry))) {
		s.addAlloc(lv, id, gone, problems)
	}
}

// allocHolds reports whether the snapshot's allocation id, added as m, is
// still the state's: the same object, live, not gone, with the same
// facts from its group (its job or what is known of it may have changed).
func (s *State) allocHolds(lv *live, id string, m allocMark, gone func(string) bool) bool {
	a := s.Allocs[id]
	if a != m.alloc || a.ModifyIndex != m.index || !Live(a) || (gone != nil && gone(id)) {
		return false
	}
	if !sameGroupFacts(s.allocOf(a, lv.profiles), m.as) {
		return false
	}
	m.job, m.learned = s.jobOf(a), s.learnedGen
	lv.allocs[id] = m
	return true
}

// mergeSets is the union of two sets.
func mergeSets(a, b map[string]bool) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
