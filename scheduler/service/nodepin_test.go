package service

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// perGPUNode is dgx1As whose plugin offers each GPU as a device group of
// its own (device_groups = "gpu").
func perGPUNode(t *testing.T, id string) *api.Node {
	n := dgx1As(t, id, "dc1")
	g, err := nomadattr.DecodeGroup(n.NodeResources.Devices[0])
	must.NoError(t, err)
	n.NodeResources.Devices = nomadattr.GPUDevices(g)
	return n
}

// runningAt adds a running allocation of job id's group g on node.
func (f *fakeNomad) runningAt(id, allocID, node string, shares []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: allocID, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: node,
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}}}}}})
}

// restartsCounted sums gpushare_restarts_total over its reasons (none
// counted yet: 0).
func restartsCounted(t *testing.T, s *Service) float64 {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	sum := 0.0
	for _, line := range strings.Split(rr.Body.String(), "\n") {
		if strings.HasPrefix(line, "gpushare_restarts_total{") {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			must.NoError(t, err)
			sum += f
		}
	}
	return sum
}

// destructive is what Nomad compares to decide a destructive update of a
// group: its tasks (device blocks, env, ...) and the group's and job's
// meta.
func destructive(j *api.Job) string {
	tg := pin.Group(j, "g")
	b, err := json.Marshal([]any{tg.Tasks, tg.Meta, j.Meta})
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// On nodes where Nomad keeps each allocation on one GPU, a group is pinned
// by node alone; scaled past its pin it is pinned again with its running
// allocation's node kept, and nothing Nomad treats as destructive changes:
// 0 restarts, counted so. With share pins (in_place_pins = false) the same
// scale replaces the running allocation, as before.
func TestANodePinnedGroupScaledKeepsWhatRuns(t *testing.T) {
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
	f, s, rec := placedFirst(t, gated("web", 25), nodes...)
	must.Eq(t, pin.ContractNode, rec.Contract)
	tg := pin.Group(f.jobs["web"], "g")
	must.True(t, pin.HasRankAffinities(tg))
	_, inMeta := tg.Meta[pin.MetaPlacement]
	must.False(t, inMeta, must.Sprint("the record is carried in constraints"))
	trusted, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok, must.Sprint("a node pin's record is trusted"))
	must.Eq(t, rec.Nodes, trusted.Nodes)
	// the GPU Nomad takes: the first with room in the node's cell order
	// (the pin's cell-rank affinities), GPU 0 here
	must.Eq(t, []string{gpuUUIDs(t, nodes[0])[0]}, rec.GPUs)
	first := rec.Nodes[0]
	f.runningAt("web", "alloc-1", first, rec.Shares)
	before := destructive(f.jobs["web"])

	f.scaled(t, "web", 3)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	st := stageOf(s, "web")
	must.Eq(t, lifecycle.Scaling, st.State, must.Sprint(st.Why))
	must.StrContains(t, st.Why, "stay")
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok)
	must.Eq(t, 3, grown.Count)
	must.SliceContains(t, grown.Nodes, first, must.Sprint("the running allocation's node stays in the pin"))
	for _, sh := range rec.Shares {
		must.SliceContains(t, grown.Shares, sh, must.Sprint("the running allocation's shares are named as they run"))
	}
	must.Eq(t, before, destructive(f.jobs["web"]), must.Sprint("the re-pin changed what Nomad treats as destructive"))
	must.Eq(t, 0.0, restartsCounted(t, s))

	// the control: share pins, the same scale
	cfgOff := false
	s2nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
	f2 := &fakeNomad{nodes: s2nodes, jobs: map[string]*api.Job{}}
	f2.put(gated("web", 25))
	s2 := loadedService(t, f2)
	s2.loop.cfg.InPlacePins = &cfgOff
	s2.loop.reconcile(t.Context())
	rec2, ok := pin.ParseRecord(f2.jobs["web"], "g")
	must.True(t, ok)
	must.Eq(t, "", rec2.Contract)
	f2.runningAt("web", "alloc-1", rec2.Nodes[0], rec2.Shares)
	before2 := destructive(f2.jobs["web"])
	f2.scaled(t, "web", 3)
	must.NoError(t, s2.watcher.resync(t.Context()))
	s2.loop.reconcile(t.Context())
	must.NotEq(t, before2, destructive(f2.jobs["web"]))
	must.Eq(t, 1.0, counterValue(t, s2, `gpushare_restarts_total{reason="scale"}`))
}

// A node of a node-pinned group of two is drained: the group is pinned
// again on the node that was not touched and another; the allocation on
// the untouched node stays (its node in the new pin, nothing destructive
// changed), and only the drained one is counted as moved.
func TestANodePinnedGroupKeepsTheUntouchedNodeThroughADrain(t *testing.T) {
	j := gated("pair", 60)
	j.TaskGroups[0].Count = ptr(2)
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2"), perGPUNode(t, "node-3")}
	f, s, rec := placedFirst(t, j, nodes...)
	must.Eq(t, pin.ContractNode, rec.Contract)
	must.SliceLen(t, 2, rec.Nodes, must.Sprint("spread over two nodes"))
	drained, kept := rec.Nodes[0], rec.Nodes[1]
	f.runningAt("pair", "alloc-d", drained, sharesOn(t, f, rec, drained))
	f.runningAt("pair", "alloc-k", kept, sharesOn(t, f, rec, kept))
	before := destructive(f.jobs["pair"])
	f.mu.Lock()
	for _, n := range f.nodes {
		if n.ID == drained {
			n.Drain, n.SchedulingEligibility = true, api.NodeSchedulingIneligible
			n.ModifyIndex++
		}
	}
	// Nomad's drainer stops the allocation there
	f.index++
	f.allocs[0].DesiredStatus, f.allocs[0].ModifyIndex = "stop", f.index
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())

	next, ok := s.state.Record(f.jobs["pair"], "g")
	must.True(t, ok, must.Sprint(stageOf(s, "pair").Why))
	must.SliceContains(t, next.Nodes, kept)
	must.SliceNotContains(t, next.Nodes, drained)
	must.Eq(t, 2, next.Count)
	must.SliceLen(t, 120, next.Shares)
	must.Eq(t, before, destructive(f.jobs["pair"]))
	must.Eq(t, 0.0, restartsCounted(t, s))
	for _, sh := range sharesOn(t, f, rec, kept) {
		must.SliceContains(t, next.Shares, sh, must.Sprint("the kept allocation's shares are named as they run"))
	}
}

// Scaled 1 -> 2, a node-pinned group's new allocation goes to another
// node, as the group's replicas spread (Nomad's job anti-affinity): the
// one that stays counts. Decided as if it were alone, a fraction packs
// onto the GPU of the one that runs.
func TestANodePinnedGroupGrowsAroundWhatRuns(t *testing.T) {
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
	f, s, rec := placedFirst(t, gated("web", 25), nodes...)
	must.SliceLen(t, 1, rec.Nodes)
	f.runningAt("web", "alloc-1", rec.Nodes[0], rec.Shares)
	f.scaled(t, "web", 2)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok, must.Sprint(stageOf(s, "web").Why))
	must.Eq(t, 2, grown.Count)
	must.SliceLen(t, 2, grown.Nodes, must.Sprint("the new allocation spread to the other node"))
	must.True(t, pin.Group(f.jobs["web"], "g").Spreads != nil, must.Sprint("Nomad is told to spread them too"))
}

// The same file registered again (a pipeline) is pinned byte for byte as
// before under a node pin too: the group's constraints, device block,
// spread and env are those Nomad runs, so it updates in place.
func TestANodePinnedGroupRegisteredAgainIsPinnedAsBefore(t *testing.T) {
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
	f, s, rec := placedFirst(t, gated("q", 25), nodes...)
	must.Eq(t, pin.ContractNode, rec.Contract)
	f.runningAt("q", "alloc-q", rec.Nodes[0], rec.Shares)
	first, err := json.Marshal(pin.Group(f.jobs["q"], "g"))
	must.NoError(t, err)

	f.put(gated("q", 25)) // the same file again
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, err := json.Marshal(pin.Group(f.jobs["q"], "g"))
	must.NoError(t, err)
	must.Eq(t, string(first), string(again))
}

// Carriers written by hand, or copied from another group, count for
// nothing: the record's signature is checked as a share pin's meta is.
func TestANodePinsCarriersWrittenByHandAreNotTrusted(t *testing.T) {
	nodes := []*api.Node{perGPUNode(t, "node-1")}
	f, s, _ := placedFirst(t, gated("a", 25), nodes...)
	j, err := copyJob(f.jobs["a"])
	must.NoError(t, err)
	j.ID, j.Name = ptr("b"), ptr("b") // another job, the same carriers
	f.put(j)
	must.NoError(t, s.watcher.resync(t.Context()))
	_, ok := s.state.Record(f.jobs["b"], "g")
	must.False(t, ok, must.Sprint("a record copied into another job is trusted"))

	forged, err := copyJob(f.jobs["a"])
	must.NoError(t, err)
	for _, c := range pin.Group(forged, "g").Constraints {
		if pin.IsCarrier(c) && c.LTarget == pin.CarryPlacement {
			must.StrContains(t, c.RTarget, `"count":1`)
			c.RTarget = strings.Replace(c.RTarget, `"count":1`, `"count":9`, 1)
		}
	}
	f.put(forged)
	must.NoError(t, s.watcher.resync(t.Context()))
	_, ok = s.state.Record(f.jobs["a"], "g")
	must.False(t, ok, must.Sprint("a record changed by hand is trusted"))
}

// Several allocations of a node-pinned group on one node are not staged
// behind hold jobs: Nomad takes each allocation's shares from one GPU's
// group by itself.
func TestANodePinIsNotStaged(t *testing.T) {
	j := gated("thirds", 60)
	j.TaskGroups[0].Count = ptr(3)
	f, s, rec := placedFirst(t, j, perGPUNode(t, "node-1"))
	must.Eq(t, pin.ContractNode, rec.Contract)
	must.SliceLen(t, 3, rec.GPUs, must.Sprint("three GPUs of one node"))
	must.MapEmpty(t, s.loop.staging.waiting, must.Sprint("a node pin waits for no hold"))
	for id := range f.jobs {
		must.False(t, isHold(id), must.Sprintf("hold %s registered for a node pin", id))
	}
}

// A scale past a node pin that limits each node (pin.PerNodeConstraint):
// Nomad, held by the limit, places nothing and says why (its pinned node
// filtered by distinct_property). That is no refusal of the node: the
// group is pinned again for its new count around the allocation that
// runs, which stays, and no pinned node is left out. Nomad's account of
// a node filtered by another rule is still a refusal (the control).
func TestAScaleHeldByTheNodeLimitIsNoRefusal(t *testing.T) {
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2"), perGPUNode(t, "node-3")}
	f, s, rec := placedFirst(t, gated("web", 25), nodes...)
	must.Eq(t, 1, rec.PerNode, must.Sprint("one allocation, on one node: the limit is 1"))
	first := rec.Nodes[0]
	f.runningAt("web", "alloc-1", first, rec.Shares)
	before := destructive(f.jobs["web"])
	heldBy := func(reason string) *api.Evaluation {
		ev := failedEval(f, "web")
		ev.FailedTGAllocs["g"] = &api.AllocationMetric{NodesEvaluated: 3, NodesFiltered: 3, ConstraintFiltered: map[string]int{
			pin.NodeAttribute + " " + pin.OpSetContains + " " + first: 2, reason: 1}}
		return ev
	}

	f.scaled(t, "web", 3)
	s.state.PutEval(heldBy("distinct_property: " + pin.NodeAttribute + "=" + first + " used by 1 allocs"))
	_, failed := s.state.NomadFailed(f.jobs["web"], "g")
	must.False(t, failed, must.Sprint("a pinned node at the pin's own limit is no refusal"))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok)
	must.Eq(t, 3, grown.Count)
	must.SliceContains(t, grown.Nodes, first, must.Sprint("the running allocation's node stays"))
	must.SliceLen(t, 3, grown.Nodes, must.Sprint("the scale is spread over the nodes, as Nomad alone spreads it"))
	must.Eq(t, 1, grown.PerNode)
	must.Eq(t, before, destructive(f.jobs["web"]))
	must.Eq(t, 0.0, restartsCounted(t, s))

	// the control: the pinned node filtered by a rule of the job
	s.state.PutEval(heldBy("${attr.kernel.name} = plan9"))
	_, failed = s.state.NomadFailed(f.jobs["web"], "g")
	must.True(t, failed)
}

// The pin's own limit per node is no rule of the job: pinned again for a
// scale on a cluster of one node, the group stacks there (the limit
// follows) rather than being refused for its own old limit; a user's
// identical rule still counts.
func TestANodePinsOwnLimitIsNotAJobRule(t *testing.T) {
	f, s, rec := placedFirst(t, gated("web", 25), perGPUNode(t, "node-1"))
	must.Eq(t, 1, rec.PerNode)
	f.runningAt("web", "alloc-1", rec.Nodes[0], rec.Shares)
	f.scaled(t, "web", 3)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("web")]))
	must.Eq(t, 3, grown.Count)
	must.Eq(t, 3, grown.PerNode, must.Sprint("three on the one node: the limit follows the decision"))

	// the user's own limit of one per node is a rule: two more cannot run
	own := gated("own", 25)
	own.TaskGroups[0].Count = ptr(3)
	own.TaskGroups[0].Constraints = append(own.TaskGroups[0].Constraints,
		&api.Constraint{LTarget: pin.NodeAttribute, Operand: pin.OpDistinctProperty, RTarget: "1"})
	f.put(own)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, ok = pin.ParseRecord(f.jobs["own"], "g")
	must.False(t, ok)
	must.StrContains(t, s.loop.answers.pending[key("own")], "distinct_property")
}
