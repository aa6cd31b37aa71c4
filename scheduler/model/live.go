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
// the snapshot's copy must be made again. It is the state's, written only
// by Snapshot, whose caller is the only one to call it (the service's
// pass, which reads the state while no one writes it); its nodes are kept
// by its own methods from the state's Nodes, its allocations by the
// state's (allocOf reads what their groups add).
type live struct {
	snap     *placement.Snapshot
	profiles *interference.Model
	nodes    map[string]nodeMark
	allocs   map[string]allocMark
	holds    map[string]decide.Key
	// onNode are the IDs of the allocations in the snapshot by node.
	onNode map[string]map[string]bool
	// retry are the live allocations the snapshot lacks (their node is
	// not in it, they are gone, or adding them failed) and badNodes the
	// usable nodes it lacks (adding them failed): looked at every time.
	retry    map[string]bool
	badNodes map[string]bool
	// holdJobs are the jobs (by key) with a pinned group that holds
	// shares for missing or replacing allocations (wantsHolds).
	holdJobs map[string]bool
}

func newLive(profiles *interference.Model) *live {
	return &live{snap: placement.NewSnapshot(), profiles: profiles,
		nodes: map[string]nodeMark{}, allocs: map[string]allocMark{}, holds: map[string]decide.Key{},
		onNode: map[string]map[string]bool{}, retry: map[string]bool{}, badNodes: map[string]bool{}, holdJobs: map[string]bool{}}
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
	// reservable is snap.Reservable(as.Shares) (State.Reservable)
	reservable bool
}

// keep records that allocation id is in the snapshot as m.
func (lv *live) keep(id string, m allocMark) {
	lv.allocs[id] = m
	if lv.onNode[m.as.Node] == nil {
		lv.onNode[m.as.Node] = map[string]bool{}
	}
	lv.onNode[m.as.Node][id] = true
}

// held returns the mark of allocation a in the snapshot, when the
// snapshot holds that very object at its modify index (lv may be nil: no
// snapshot yet): what Reservable and SharesOf read of it.
func (lv *live) held(a *api.Allocation) (allocMark, bool) {
	if lv == nil {
		return allocMark{}, false
	}
	m, ok := lv.allocs[a.ID]
	return m, ok && m.alloc == a && m.index == a.ModifyIndex
}

// forget records that allocation id is no longer in the snapshot.
func (lv *live) forget(id string) {
	m, ok := lv.allocs[id]
	if !ok {
		return
	}
	delete(lv.allocs, id)
	if on := lv.onNode[m.as.Node]; on != nil {
		delete(on, id)
		if len(on) == 0 {
			delete(lv.onNode, m.as.Node)
		}
	}
}

// dropNode removes node id, and its allocations, from the snapshot, and
// returns the IDs of those allocations.
func (lv *live) dropNode(id string, problems *[]string) []string {
	if _, err := lv.snap.RemoveNode(id); err != nil {
		*problems = append(*problems, fmt.Sprintf("node %s: %v", id, err))
	}
	delete(lv.nodes, id)
	ids := slices.Collect(maps.Keys(lv.onNode[id]))
	for _, aid := range ids {
		lv.forget(aid) // removed with the node
	}
	return ids
}

// addNode adds node id of the state (nodes, its Nodes) to the snapshot
// when it is usable and not there yet.
func (lv *live) addNode(nodes map[string]*api.Node, id string, problems *[]string) {
	n := nodes[id]
	delete(lv.badNodes, id)
	if _, ok := lv.nodes[id]; ok || n == nil || !Usable(n) {
		return
	}
	node, err := NodeOf(n)
	if err == nil {
		err = lv.snap.AddNode(node)
	}
	if err != nil {
		*problems = append(*problems, err.Error())
		lv.badNodes[id] = true
		return
	}
	for _, uuid := range UnhealthyGPUs(n) {
		_ = lv.snap.SetHealth(uuid, false)
	}
	lv.nodes[id] = nodeMark{n, n.ModifyIndex}
}

// nodeHolds reports whether the snapshot's node id is still the state's
// (nodes, its Nodes).
func (lv *live) nodeHolds(nodes map[string]*api.Node, id string) bool {
	n, was := nodes[id], lv.nodes[id]
	return n == was.node && n.ModifyIndex == was.index && Usable(n)
}

// syncNodes removes the nodes that left the state (nodes, its Nodes),
// changed or became unusable, and adds the usable nodes the snapshot
// lacks (with their GPUs' health).
func (lv *live) syncNodes(nodes map[string]*api.Node, problems *[]string) {
	for id := range lv.nodes {
		if !lv.nodeHolds(nodes, id) {
			lv.dropNode(id, problems)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		lv.addNode(nodes, id, problems)
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
		lv.forget(id)
	}
	clear(lv.retry)
	for _, id := range slices.Sorted(maps.Keys(s.Allocs)) {
		s.addAlloc(lv, id, gone, problems)
	}
}

// addAlloc adds allocation id of the state to the snapshot when it is
// live, not there yet, not gone and its node is there; a live one left
// out is looked at again next time (retry).
func (s *State) addAlloc(lv *live, id string, gone func(string) bool, problems *[]string) {
	a := s.Allocs[id]
	delete(lv.retry, id)
	if _, ok := lv.allocs[id]; ok || a == nil || !Live(a) {
		return
	}
	if _, ok := lv.nodes[a.NodeID]; !ok || (gone != nil && gone(id)) {
		lv.retry[id] = true
		return
	}
	pa := s.allocOf(a, lv.profiles)
	if err := lv.snap.AddAlloc(pa); err != nil {
		*problems = append(*problems, fmt.Sprintf("allocation %s: %v", a.ID, err))
		lv.retry[id] = true
		return
	}
	if in, ok := lv.snap.Alloc(id); ok {
		// the snapshot keeps its own copy of the shares, which it never
		// changes: the mark shares it rather than keep a second one
		pa.Shares = in.Shares
	}
	lv.keep(id, allocMark{alloc: a, index: a.ModifyIndex, job: s.jobOf(a), learned: s.learnedGen, as: pa,
		reservable: lv.snap.Reservable(pa.Shares)})
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
		pa.Profile, pa.MaxSlowdown, pa.Timeslice = r.Profile, r.MaxSlowdown, r.Timeslice
		pa.VC, pa.Class = Attribution(s, job, a.TaskGroup)
	}
	return pa
}

// sameGroupFacts compares what an allocation's group adds to it (its
// shares and resources come from the same Nomad object when the pointer
// is equal).
func sameGroupFacts(a, b placement.Alloc) bool {
	return a.VC == b.VC && a.Class == b.Class && a.Profile == b.Profile && a.MaxSlowdown == b.MaxSlowdown && a.Timeslice == b.Timeslice
}

// jobOf returns an allocation's job (nil when the model has none).
func (s *State) jobOf(a *api.Allocation) *api.Job { return s.Jobs[JobKey(a.Namespace, a.JobID)] }
