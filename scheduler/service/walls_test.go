package service

import (
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Namespaces are walls for introspection: a production job of a managed
// namespace slower than its bound next to an allocation of a namespace
// the scheduler does not manage moves itself; the neighbour, although it
// started last, is never stopped and its job never gated, whether or not
// its job (and the production class of its pin) is in the model.
func TestUnpairNeverMovesANeighbourOfAnotherNamespace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inModel bool
	}{
		{"job unknown to the model", false},
		{"job in the model", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newPairScene(t, func(c *config.Config) { c.Nomad.Namespaces = []string{"default"} })
			// "new" turns out to be team-b's (started last: the one a pair would move)
			sc.f.jobs["new"].Namespace = ptr("team-b")
			for _, a := range sc.f.allocs {
				if a.ID == "alloc-new" {
					a.Namespace = "team-b"
					a.ModifyIndex++ // a new version, as Nomad's every change is
				}
			}
			sc.f.index++
			must.NoError(t, sc.s.watcher.resync(t.Context()))
			if tc.inModel {
				sc.s.mu.Lock()
				sc.s.state.PutJob(sc.f.jobs["new"])
				sc.s.mu.Unlock()
			}
			var steps [][]decide.Action
			sc.s.loop.onStep = func(a []decide.Action) { steps = append(steps, a) }
			registers := sc.f.registers
			sc.sample(t, 20, 20, 20)
			sc.s.loop.reconcile(t.Context())

			must.SliceNotContains(t, sc.f.stopped, "alloc-new")
			must.SliceEmpty(t, pin.Gated(sc.f.jobs["new"]))
			must.Eq(t, []string{"alloc-old"}, sc.f.stopped) // the slow one moves, alone
			must.SliceNotEmpty(t, pin.Gated(sc.f.jobs["old"]))
			must.Eq(t, registers+1, sc.f.registers) // old's gate, nothing of team-b's
			must.SliceNotEmpty(t, steps)
			must.Eq(t, decide.Unpair, steps[0][0].Kind)
			must.StrContains(t, steps[0][0].Reason, "the only one of them this scheduler may move")
			sc.s.mu.Lock()
			_, judged := sc.s.loop.intro.shared["alloc-new"]
			sc.s.mu.Unlock()
			must.False(t, judged, must.Sprint("a neighbour's progress is not sampled"))
		})
	}
}

// The executor's wall: gating again (preempt, unpair) refuses an
// allocation of a namespace the scheduler does not manage, and registers
// and stops nothing.
func TestGateAgainRefusesAnotherNamespace(t *testing.T) {
	f := teams(t)
	s, err := newService(nsConfig("team-a"), testLogger(), f, fixedClock)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	err = s.loop.gate.gateAgain(t.Context(), []string{"alloc-a1", "alloc-b1"}, nil)
	must.True(t, errors.Is(err, errNotManaged), must.Sprint(err))
	must.StrContains(t, err.Error(), "allocation alloc-b1 is of namespace team-b")
	must.Eq(t, 0, f.registers)
}

// A guaranteed job that needs the GPU an opportunistic allocation of an
// unmanaged namespace holds does not preempt it, even when that job and
// its signed opportunistic placement are in the model: it waits.
func TestNoPreemptionAcrossNamespaces(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "busy", []int{0, 1, 2, 3, 4, 5, 6}, 0, "10h")
	running(t, f, "scavenger", []int{7}, 0, "10h")
	opp := f.jobs["scavenger"]
	opp.Namespace = ptr("team-b")
	opp.Meta[pin.MetaClass] = "opportunistic"
	_, err := pin.Pin(opp, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "node-1", GPUs: []string{gpuOf(t, f, 7)}, Shares: f.allocs[1].AllocatedResources.Tasks["t"].Devices[0].DeviceIDs}}})
	must.NoError(t, err)
	f.allocs[1].Namespace = "team-b"
	f.put(gated("urgent", 100))

	s, err := newService(nsConfig("default"), testLogger(), f, fixedClock)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	s.state.PutJob(f.jobs["scavenger"]) // even so
	s.mu.Unlock()
	registers := f.registers
	s.loop.reconcile(t.Context())

	must.Eq(t, registers, f.registers)
	must.SliceEmpty(t, pin.Gated(f.jobs["scavenger"]))
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["urgent"]))
	must.StrContains(t, s.loop.answers.pending[key("urgent")], "position 1 of 1")
}

// A virtual cluster counts only the allocations of the namespaces it
// admits whose placement the scheduler signed for it: an ungated
// allocation of another namespace whose job names gpushare.vc = research
// (managed or not, its job in the model either way) takes nothing of
// research's guarantee, and research's own job is placed.
func TestVirtualClusterCountsOnlyWhatItAdmitsAndSigned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		managed []string
	}{
		{"managed namespace the VC does not admit", []string{"*"}},
		{"unmanaged namespace", []string{"default", "research"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			running(t, f, "busy", []int{0, 1, 2, 3, 4, 5}, 0, "10h")
			running(t, f, "intruder", []int{6}, 0, "10h")
			f.jobs["intruder"].Namespace = ptr("team-b")
			f.jobs["intruder"].Meta[pin.MetaVC] = "research"
			f.allocs[1].Namespace = "team-b"
			tenant := gated("tenant", 100)
			tenant.Namespace = ptr("research")
			tenant.Meta[pin.MetaVC] = "research"
			f.put(tenant)

			cfg := config.Default()
			cfg.Nomad.Namespaces = tc.managed
			cfg.VCs = []config.VirtualCluster{{Name: "research", Namespaces: []string{"research"}, Cells: []config.Cell{{GPUs: 1, Count: 1}}}}
			must.NoError(t, cfg.Validate())
			s, err := newService(cfg, testLogger(), f, fixedClock)
			must.NoError(t, err)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.mu.Lock()
			s.state.PutJob(f.jobs["intruder"])
			snap := s.state.Snapshot(nil, nil).Snapshot
			s.mu.Unlock()
			must.MapEmpty(t, snap.VCUsage("research"))

			s.loop.reconcile(t.Context())
			must.SliceEmpty(t, pin.Gated(f.jobs["tenant"]), must.Sprint(s.loop.answers.pending[decide.Key{Namespace: "research", Job: "tenant", Group: "g"}]))
		})
	}
}

// A pinned job whose gpushare.vc is edited after its pin counts for the
// VC it was placed for (none), not the one it names now: the VC's own
// job finds its guarantee unused.
func TestVirtualClusterIgnoresAVCEditedAfterThePin(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("edited", 100))
	s := withConfig(t, f, func(c *config.Config) {
		c.VCs = []config.VirtualCluster{{Name: "research", Cells: []config.Cell{{GPUs: 1, Count: 1}}}}
	})
	rec, ok := pin.ParseRecord(f.jobs["edited"], "g")
	must.True(t, ok)
	must.Eq(t, "", rec.VC)
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-edited", Namespace: "default", JobID: "edited", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
	// the user edits the meta of the pinned version (placement and signature stay)
	j, err := f.Job(t.Context(), "", "edited")
	must.NoError(t, err)
	j.Meta[pin.MetaVC] = "research"
	f.put(j)
	t2 := gated("tenant", 100)
	t2.Meta[pin.MetaVC] = "research"
	f.put(t2)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	snap := s.state.Snapshot(nil, nil).Snapshot
	s.mu.Unlock()
	must.MapEmpty(t, snap.VCUsage("research"))

	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["tenant"]), must.Sprint(s.loop.answers.pending[key("tenant")]))
	placed, _ := pin.ParseRecord(f.jobs["tenant"], "g")
	must.Eq(t, "research", placed.VC)
	// and the tenant's allocation, once it runs, counts for research
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-tenant", Namespace: "default", JobID: "tenant", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: placed.Shares}}}}}})
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	defer s.mu.Unlock()
	must.Eq(t, map[string]int{"Tesla V100-SXM2-16GB": 1000}, s.state.Snapshot(nil, nil).Snapshot.VCUsage("research"))
}

// gpuOf is the UUID of GPU i of the fake's first node.
func gpuOf(t *testing.T, f *fakeNomad, i int) string {
	t.Helper()
	n, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	return n.GPUs[i].UUID
}

func testLogger() hclog.Logger { return hclog.NewNullLogger() }

func fixedClock() time.Time { return time.Unix(1000, 0) }

// A guaranteed group whose VC's quota its own running job holds waits with
// the quota's reason, is not refused for good, and is placed in the pass
// after that (batch) job is done.
func TestQuotaShortageWaitsUntilTheQuotaFrees(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	first := gated("first", 100)
	first.Meta[pin.MetaVC] = "research"
	first.Type = ptr("batch") // once done, it holds nothing
	f.put(first)
	s := withConfig(t, f, func(c *config.Config) {
		c.VCs = []config.VirtualCluster{{Name: "research", Cells: []config.Cell{{GPUs: 1, Count: 1}}}}
	})
	rec, ok := pin.ParseRecord(f.jobs["first"], "g")
	must.True(t, ok)
	must.Eq(t, "research", rec.VC)
	f.index++
	alloc := &api.Allocation{ID: "alloc-first", Namespace: "default", JobID: "first", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}}
	f.allocs = append(f.allocs, alloc)
	second := gated("second", 100)
	second.Meta[pin.MetaVC] = "research"
	f.put(second)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["second"]))
	must.StrContains(t, s.loop.answers.pending[key("second")], `the guaranteed capacity of virtual cluster "research" is in use`)
	must.StrContains(t, s.loop.answers.pending[key("second")], "uses 1.00 GPUs of its 1.00 GPUs")
	must.MapNotContainsKey(t, s.loop.refusals.forGood, key("second"))

	f.index++
	alloc.ClientStatus, alloc.ModifyIndex = "complete", f.index
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["second"]), must.Sprint(s.loop.answers.pending[key("second")]))
}
