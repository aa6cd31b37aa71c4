package model

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// live is the placement snapshot kept in step with the state, and what
// each of its nodes and allocations was made from: a node or allocation
// Nomad reported anew is a new object, so a pointer that changed means
// the snapshot's copy must be made again.
type live struct {
	snap     *placement.Snapshot
	profiles *interference.Model
	nodes    map[string]nodeMark
	allocs   map[string]allocMark
	holds    map[string]decide.Key
}

// nodeMark is the node object a snapshot node was made from, and its
// modify index then (an object changed in place counts as changed too).
type nodeMark struct {
	node  *api.Node
	index uint64
}

type allocMark struct {
	alloc   *api.Allocation
	index   uint64   // its modify index when added
	job     *api.Job // its job when added (nil: none)
	learned uint64   // the state's learnedGen when added
	as      placement.Alloc
}

// syncNodes removes the nodes that left, changed or became unusable, and
// adds the usable nodes the snapshot lacks (with their GPUs' health).
func (s *State) syncNodes(lv *live, problems *[]string) {
	for id, was := range lv.nodes {
		if n := s.Nodes[id]; n == was.node && n.ModifyIndex == was.index && Usable(n) {
			continue
		}
		if _, err := lv.snap.RemoveNode(id); err != nil {
			*problems = append(*problems, fmt.Sprintf("node %s: %v", id, err))
		}
		delete(lv.nodes, id)
		for aid, m := range lv.allocs {
			if m.as.Node == id {
				delete(lv.allocs, aid) // removed with the node
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.Nodes)) {
		n := s.Nodes[id]
		if _, ok := lv.nodes[id]; ok || !Usable(n) {
			continue
		}
		node, err := NodeOf(n)
		if err != nil {
			*problems = append(*problems, err.Error())
			continue
		}
		if err := lv.snap.AddNode(node); err != nil {
			*problems = append(*problems, err.Error())
			continue
		}
		for _, uuid := range UnhealthyGPUs(n) {
			_ = lv.snap.SetHealth(uuid, false)
		}
		lv.nodes[id] = nodeMark{n, n.ModifyIndex}
	}
}

// syncAllocs removes the allocations that ended, went, changed or whose
// job's request changed, and adds the live ones the snapshot lacks.
func (s *State) syncAllocs(lv *live, gone func(string) bool, problems *[]string) {
	for id, m := range lv.allocs {
		a := s.Allocs[id]
		if a == m.alloc && a.ModifyIndex == m.index && Live(a) && (gone == nil || !gone(id)) &&
			((s.jobOf(a) == m.job && s.learnedGen == m.learned) || sameGroupFacts(s.allocOf(a, lv.profiles), m.as)) {
			m.job, m.learned = s.jobOf(a), s.learnedGen
			lv.allocs[id] = m
			continue
		}
		_, _ = lv.snap.Remove(id)
		delete(lv.allocs, id)
	}
	for _, id := range slices.Sorted(maps.Keys(s.Allocs)) {
		a := s.Allocs[id]
		if _, ok := lv.allocs[id]; ok || !Live(a) || (gone != nil && gone(id)) {
			continue
		}
		if _, ok := lv.nodes[a.NodeID]; !ok {
			continue
		}
		pa := s.allocOf(a, lv.profiles)
		if err := lv.snap.AddAlloc(pa); err != nil {
			*problems = append(*problems, fmt.Sprintf("allocation %s: %v", a.ID, err))
			continue
		}
		lv.allocs[id] = allocMark{alloc: a, index: a.ModifyIndex, job: s.jobOf(a), learned: s.learnedGen, as: pa}
	}
}

// allocOf is allocation a for the snapshot, with its group's VC, class and
// interference profile. An allocation of a namespace the scheduler does
// not manage is a neighbour of unknown class, VC and profile, whatever its
// job's meta says; the VC and class of one it manages are those its
// signed placement was made for (see Attribution).
func (s *State) allocOf(a *api.Allocation, profiles *interference.Model) placement.Alloc {
	pa := placement.Alloc{ID: a.ID, Node: a.NodeID, Shares: Shares(a), Res: Resources(a)}
	job := s.jobOf(a)
	if job == nil || !s.Manages(a.Namespace) {
		return pa
	}
	if r, err := s.Request(job, a.TaskGroup, profiles); err == nil {
		pa.Profile, pa.MaxSlowdown = r.Profile, r.MaxSlowdown
		pa.VC, pa.Class = s.Attribution(job, a.TaskGroup)
	}
	return pa
}

// sameGroupFacts compares what an allocation's group adds to it (its
// shares and resources come from the same Nomad object when the pointer
// is equal).
func sameGroupFacts(a, b placement.Alloc) bool {
	return a.VC == b.VC && a.Class == b.Class && a.Profile == b.Profile && a.MaxSlowdown == b.MaxSlowdown
}

// jobOf returns an allocation's job (nil when the model has none).
func (s *State) jobOf(a *api.Allocation) *api.Job { return s.Jobs[JobKey(a.Namespace, a.JobID)] }
