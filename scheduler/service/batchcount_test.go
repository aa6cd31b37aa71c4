package service

import (
	"slices"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// heldFor lists the shares the model holds for a pinned group's missing
// allocations, by node.
func heldFor(s *Service, k decide.Key) map[string][]string {
	b := s.state.Snapshot(nil, nil)
	out := map[string][]string{}
	for _, a := range b.Snapshot.Allocs() {
		if b.HeldFor[a.ID] == k {
			out[a.Node] = append(out[a.Node], a.Shares...)
		}
	}
	return out
}

// sharesOn are the shares of rec on node n.
func sharesOn(t *testing.T, f *fakeNomad, rec *pin.Record, n string) []string {
	t.Helper()
	var uuids []string
	for _, node := range f.nodes {
		if node.ID == n {
			uuids = gpuUUIDs(t, node)
		}
	}
	var out []string
	for _, sh := range rec.Shares {
		id, err := devicefn.ParseShareID(sh)
		must.NoError(t, err)
		if slices.Contains(uuids, id.UUID) {
			out = append(out, sh)
		}
	}
	return out
}

// setAlloc runs allocation id of job on node with shares, or changes its
// client status (and desired status) when it exists, as Nomad reports it.
func (f *fakeNomad) setAlloc(job, id, node string, shares []string, client, desired string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for _, a := range f.allocs {
		if a.ID == id {
			a.ClientStatus, a.DesiredStatus, a.ModifyIndex = client, desired, f.index
			return
		}
	}
	f.allocs = append(f.allocs, &api.Allocation{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: node,
		DesiredStatus: desired, ClientStatus: client, ModifyIndex: f.index, CreateIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}}}}}})
}

// nodeDown marks node n down, as Nomad does once its client stops
// heartbeating.
func (f *fakeNomad) nodeDown(n string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, node := range f.nodes {
		if node.ID == n {
			node.Status = "down"
		}
	}
}

// A batch group of count 3 one of whose allocations completed while the
// other two wait for Nomad is not done: Nomad counts the completed one as
// one of the count (its reconciler puts terminal allocations of a batch
// job among the untainted) and still places the other two, so their
// pinned shares stay held and their pin stays. Before, the group was
// `done` at its first completion: the shares of the two not yet placed
// were given to the next job, and one lost with its node was never pinned
// again.
//
// A completed allocation whose node is lost later is not placed again
// (Nomad leaves terminal allocations of a batch job where they are): the
// group is not pinned again for it, which would run it again (a new pin
// is a new version, and Nomad ignores the completed allocations of an
// older one). A running one lost with its node is placed again: Nomad
// places its replacement inside the pin, on the shares the completed one
// freed.
func TestBatchGroupOfThreeIsNotDoneAtItsFirstCompletion(t *testing.T) {
	scene := func(t *testing.T) (*fakeNomad, *Service, *pin.Record) {
		j := gated("etl", 25)
		j.Type = ptr("batch")
		j.TaskGroups[0].Count = ptr(3)
		nodes := []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1"), dgx1As(t, "node-3", "dc1")}
		f, s, rec := placedFirst(t, j, nodes...)
		must.Eq(t, []string{"node-1", "node-2", "node-3"}, rec.Nodes, must.Sprint("one allocation per node"))
		// alloc-a runs on node-1 and completes; Nomad has not placed the
		// other two yet
		f.setAlloc("etl", "alloc-a", "node-1", sharesOn(t, f, rec, "node-1"), "running", "run")
		f.setAlloc("etl", "alloc-a", "", nil, "complete", "run")
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
		must.Eq(t, 2, st.Missing)
		// two allocations' worth of the pinned shares, which the
		// completed one freed, stay held (Nomad may place the two on
		// any of them)
		n := 0
		for _, shares := range heldFor(s, key("etl")) {
			for _, sh := range shares {
				must.SliceContains(t, rec.Shares, sh)
				n++
			}
		}
		must.Eq(t, 50, n, must.Sprint("the shares of the two not placed yet stay held"))
		still, ok := s.state.Record(f.jobs["etl"], "g")
		must.True(t, ok)
		must.Eq(t, rec.Shares, still.Shares, must.Sprint("the other two still pinned"))
		return f, s, rec
	}
	pass := func(t *testing.T, s *Service) {
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
	}

	t.Run("a completed one's node lost: not placed again", func(t *testing.T) {
		f, s, rec := scene(t)
		registers := f.registers
		f.nodeDown("node-1") // alloc-a stays complete: Nomad marks only live allocations lost
		pass(t, s)
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
		must.Eq(t, 2, st.Missing, must.Sprint("the completed one is one of the count"))
		must.Eq(t, registers, f.registers, must.Sprint("not pinned again: that would run the completed one again"))
		held := heldFor(s, key("etl"))
		must.Eq(t, sharesOn(t, f, rec, "node-2"), held["node-2"])
		must.Eq(t, sharesOn(t, f, rec, "node-3"), held["node-3"])

		// the other two run, then complete: running, then done, holding nothing
		f.setAlloc("etl", "alloc-b", "node-2", sharesOn(t, f, rec, "node-2"), "running", "run")
		f.setAlloc("etl", "alloc-c", "node-3", sharesOn(t, f, rec, "node-3"), "running", "run")
		pass(t, s)
		must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
		f.setAlloc("etl", "alloc-b", "", nil, "complete", "run")
		pass(t, s)
		must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint("one still runs"))
		f.setAlloc("etl", "alloc-c", "", nil, "complete", "run")
		pass(t, s)
		must.Eq(t, lifecycle.Done, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
		must.MapEmpty(t, heldFor(s, key("etl")))
		must.Eq(t, registers, f.registers)
	})

	t.Run("a running one lost: placed again", func(t *testing.T) {
		f, s, rec := scene(t)
		registers := f.registers
		f.setAlloc("etl", "alloc-b", "node-2", sharesOn(t, f, rec, "node-2"), "running", "run")
		pass(t, s)
		must.Eq(t, 1, stageOf(s, "etl").Missing)
		f.nodeDown("node-2")
		f.setAlloc("etl", "alloc-b", "", nil, "lost", "stop")
		pass(t, s)
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
		must.Eq(t, 2, st.Missing, must.Sprint("the lost one is placed again"))
		held := heldFor(s, key("etl"))
		must.Eq(t, sharesOn(t, f, rec, "node-1"), held["node-1"], must.Sprint("on the shares the completed one freed"))
		must.Eq(t, sharesOn(t, f, rec, "node-3"), held["node-3"])
		must.Eq(t, registers, f.registers, must.Sprint("the pin has room for it: not pinned again"))

		// node-3 lost too: the pin has room for one of the two only; pinned
		// again off the lost nodes
		f.nodeDown("node-3")
		pass(t, s)
		st = stageOf(s, "etl")
		must.Eq(t, lifecycle.Migrating, st.State, must.Sprint(st.Why))
		again, ok := pin.ParseRecord(f.jobs["etl"], "g")
		must.True(t, ok)
		must.SliceNotContains(t, again.Nodes, "node-2")
		must.SliceNotContains(t, again.Nodes, "node-3")
	})
}
