package service

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// spanning is n shares taken half from each of the first two GPUs of the
// fake's node: what Nomad gives a fraction from one device group in map
// order, and what Reserve refuses.
func spanning(t *testing.T, f *fakeNomad, n int) []string {
	t.Helper()
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s:%d", node.GPUs[i%2].UUID, 90+i/2))
	}
	return out
}

// failedEval is Nomad's evaluation of job id's current version that could
// not place group g.
func failedEval(f *fakeNomad, id string) *api.Evaluation {
	return &api.Evaluation{ID: "eval-" + id, Namespace: "default", JobID: id, Status: api.EvalStatusComplete,
		JobModifyIndex: *f.jobs[id].JobModifyIndex,
		FailedTGAllocs: map[string]*api.AllocationMetric{"g": {NodesEvaluated: 1, NodesFiltered: 1,
			ConstraintFiltered: map[string]int{"${attr.kernel.name} = plan9": 1}}}}
}

// Adoption never replaces an allocation that runs on valid shares, and
// leaves a new ungated job to Nomad until Nomad has tried: only a failed
// evaluation of its version, or an allocation on shares Reserve refuses,
// makes the service pin it.
func TestAdoptionLeavesValidAllocationsAlone(t *testing.T) {
	ungated := func(id string, count int) *api.Job {
		j := gated(id, 25)
		j.TaskGroups[0].Constraints = nil
		j.TaskGroups[0].Count = ptr(count)
		return j
	}
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(ungated("fresh", 1))   // not evaluated by Nomad yet
	f.put(ungated("half", 2))    // one valid allocation, one Nomad could not place
	f.put(ungated("refused", 1)) // Nomad could not place it at all
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	var valid []string
	for i := range 25 {
		valid = append(valid, fmt.Sprintf("%s:%d", node.GPUs[3].UUID, i))
	}
	f.runningOn("half", "alloc-half", valid)
	s := loadedService(t, f)
	s.state.PutEval(failedEval(f, "half"))
	s.state.PutEval(failedEval(f, "refused"))
	s.loop.reconcile(t.Context())

	_, ok := pin.ParseRecord(f.jobs["fresh"], "g")
	must.False(t, ok, must.Sprint("a job Nomad has not evaluated yet is left to Nomad"))
	_, ok = pin.ParseRecord(f.jobs["half"], "g")
	must.False(t, ok, must.Sprint("pinning would replace the allocation that runs on valid shares"))
	_, ok = pin.ParseRecord(f.jobs["refused"], "g")
	must.True(t, ok)

	// Nomad placed the fresh job on shares of two GPUs: Reserve refuses
	// them, so it is adopted, and the replacement is counted
	f.runningOn("fresh", "alloc-fresh", spanning(t, f, 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, ok = pin.ParseRecord(f.jobs["fresh"], "g")
	must.True(t, ok)
	must.Eq(t, 1.0, counterValue(t, s, `gpushare_restarts_total{reason="adopt"}`))
}

// A pin Nomad evaluated and could not place is noticed: its hold ends, it
// is decided again without its nodes, and its reason says what Nomad said.
func TestAPinNomadCannotPlaceIsDecidedAgain(t *testing.T) {
	f, s, rec := pinnedX(t)
	must.True(t, s.state.Pinned(f.jobs["x"], "g"))
	s.state.PutEval(failedEval(f, "x"))
	s.loop.reconcile(t.Context())
	why := s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")]
	must.StrContains(t, why, "${attr.kernel.name} = plan9")
	must.StrContains(t, why, "could not be placed")
	st, found := s.view.jobStatus("default", "x", "default")
	must.True(t, found)
	must.Eq(t, "pending", st.Groups[0].State) // not "pinned": Nomad will not place it there
	must.StrContains(t, st.Groups[0].Reason, "plan9")

	// its shares are held no more: a later job gets them
	f.put(gated("later", 800))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.state.PutEval(failedEval(f, "x"))
	s.loop.reconcile(t.Context())
	later, ok := pin.ParseRecord(f.jobs["later"], "g")
	must.True(t, ok)
	must.SliceLen(t, 800, later.Shares)
	for _, sh := range rec.Shares {
		must.SliceContains(t, later.Shares, sh)
	}
}

// A paused periodic job is a template Nomad never evaluates: it is not
// pinned, and a pin it carries holds nothing.
func TestPausedPeriodicHoldsNothing(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	j := gated("nightly", 800)
	j.Periodic = &api.PeriodicConfig{Enabled: ptr(false), Spec: ptr("@daily")}
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["nightly"], "g")
	must.False(t, ok)
	f.put(gated("now", 800))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, ok = pin.ParseRecord(f.jobs["now"], "g")
	must.True(t, ok)
}

// A group of two one-GPU allocations on an idle 8-GPU node is not refused
// for good (the cluster could hold it under Nomad's rules): it waits, and
// its reason explains gpushare's rule of one whole-GPU allocation of a
// group per node and what to do.
func TestTwoWholeGPUsOnOneNodeWaitWithTheRule(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	j := gated("two", 100)
	j.TaskGroups[0].Count = ptr(2)
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	key := model.KeyOf(f.jobs["two"], "g")
	must.MapNotContainsKey(t, s.loop.refusals.forGood, key)
	must.StrContains(t, s.loop.answers.pending[key], "at most one whole-GPU allocation of a group per node")
	must.StrContains(t, s.loop.answers.pending[key], "split it into groups of count 1")
}

// A pin Nomad could not place only because its shares were still held (an
// allocation being preempted or replaced) is no failure: Nomad's blocked
// evaluation places it once they free, and its shares stay held for it.
func TestAPinWaitingForItsSharesKeepsThem(t *testing.T) {
	f, s, rec := pinnedX(t)
	ev := failedEval(f, "x")
	ev.FailedTGAllocs["g"] = &api.AllocationMetric{NodesEvaluated: 1, NodesExhausted: 1,
		DimensionExhausted: map[string]int{"devices: no devices match request": 1}}
	s.state.PutEval(ev)
	version := *f.jobs["x"].Version
	f.put(gated("later", 800))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.state.PutEval(ev)
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version) // not decided again
	_, ok := pin.ParseRecord(f.jobs["later"], "g")
	must.False(t, ok, must.Sprintf("x's %d shares are still held", len(rec.Shares)))
}

// A pin Nomad refuses on one node and then on another is decided again
// without both: never back and forth between two nodes Nomad refuses.
func TestRefusedPinsAvoidEveryRefusedNode(t *testing.T) {
	src, err := fixtures.FS.ReadFile(fixtures.PCIe4GPU)
	must.NoError(t, err)
	st, err := fixture.Parse("pcie", src)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, "mps", nil)[0]
	other := &api.Node{ID: "node-2", Name: "pcie", Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536},
			Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}}}}
	f := &fakeNomad{nodes: []*api.Node{dgx1(t), other}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	seen := map[string]bool{}
	for range 4 {
		rec, _ := pin.ParseRecord(f.jobs["x"], "g")
		must.MapNotContainsKey(t, seen, rec.Nodes[0], must.Sprint("pinned again on a node Nomad refused"))
		seen[rec.Nodes[0]] = true
		version := *f.jobs["x"].Version
		must.NoError(t, s.watcher.resync(t.Context()))
		s.state.PutEval(failedEval(f, "x"))
		s.loop.reconcile(t.Context())
		if *f.jobs["x"].Version == version {
			break // not pinned again: it waits
		}
	}
	must.MapLen(t, 2, seen)
	must.StrContains(t, s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")], "could not be placed")

	// what Nomad refused (a port, a disk: what the scheduler does not
	// model) may have gone: refusedFor later the group is pinned again
	// rather than waiting for ever
	version := *f.jobs["x"].Version
	s.loop.now = func() time.Time { return time.Unix(1000, 0).Add(refusedFor - time.Second) }
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version, must.Sprint("within refusedFor: still waits"))
	s.loop.now = func() time.Time { return time.Unix(1000, 0).Add(refusedFor) }
	s.loop.reconcile(t.Context())
	must.Greater(t, version, *f.jobs["x"].Version, must.Sprint(s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")]))
}

// A pin Nomad could not place because its node's ports (which the
// scheduler does not model) are taken is decided again elsewhere.
func TestAPinOnATakenPortIsDecidedAgain(t *testing.T) {
	f, s, _ := pinnedX(t)
	ev := failedEval(f, "x")
	ev.FailedTGAllocs["g"] = &api.AllocationMetric{NodesEvaluated: 1, NodesExhausted: 1,
		DimensionExhausted: map[string]int{"network: port collision": 1}}
	s.state.PutEval(ev)
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")], "port collision")
}

// A scheduler that starts after Nomad failed to place a pin lists Nomad's
// failed evaluations: the pin is noticed without waiting for Nomad to
// evaluate it again.
func TestFailedEvaluationsAreListedOnStart(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	loadedService(t, f).loop.reconcile(t.Context()) // pinned, signed; then this replica stops
	f.evals = append(f.evals, failedEval(f, "x"))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")], "could not be placed")
}

// On a mixed cluster Nomad counts the nodes that lack the job's driver or
// fail its constraints under those rules, not under the pin's: a pin whose
// one node was found exhausted still only waits for its shares, and keeps
// them.
func TestAPinWaitingForItsSharesOnAMixedClusterKeepsThem(t *testing.T) {
	f, s, rec := pinnedX(t)
	ev := failedEval(f, "x")
	ev.FailedTGAllocs["g"] = &api.AllocationMetric{NodesEvaluated: 4, NodesFiltered: 3, NodesExhausted: 1,
		ConstraintFiltered: map[string]int{"${attr.kernel.name} = linux": 1, "missing drivers": 1,
			fmt.Sprintf("%s %s %s", pin.NodeAttribute, pin.OpSetContains, strings.Join(rec.Nodes, ",")): 1},
		DimensionExhausted: map[string]int{"devices: no devices match request": 1}}
	s.state.PutEval(ev)
	version := *f.jobs["x"].Version
	must.NoError(t, s.watcher.resync(t.Context()))
	s.state.PutEval(ev)
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version, must.Sprint(s.loop.answers.pending[model.KeyOf(f.jobs["x"], "g")]))
	_, failed := s.state.NomadFailed(f.jobs["x"], "g")
	must.False(t, failed)
}
