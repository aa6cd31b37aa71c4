package service

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// dgx1As is a DGX-1 node of its own (GPU UUIDs prefixed by its ID) in a
// datacenter, with docker and Linux.
func dgx1As(t *testing.T, id, dc string) *api.Node {
	n := dgx1(t)
	n.ID, n.Name, n.Datacenter = id, "dgx1-"+id, dc
	n.Attributes = map[string]string{"kernel.name": "linux"}
	n.Meta = map[string]string{}
	n.Drivers = map[string]*api.DriverInfo{"docker": {Detected: true, Healthy: true}}
	for _, d := range n.NodeResources.Devices {
		for k, a := range d.Attributes {
			if a.StringVal != nil && strings.HasPrefix(*a.StringVal, "GPU-") {
				d.Attributes[k] = &api.Attribute{StringVal: ptr(strings.Replace(*a.StringVal, "GPU-", "GPU-"+id+"-", 1))}
			}
		}
	}
	return n
}

// twoNodes is a fake Nomad with DGX-1s node-1 (dc1) and node-2 (dc2); with
// nothing else to tell them apart the placement core prefers node-1.
func twoNodes(t *testing.T) *fakeNomad {
	return &fakeNomad{nodes: []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc2")}, jobs: map[string]*api.Job{}}
}

func pinnedNodes(t *testing.T, f *fakeNomad, id string) []string {
	t.Helper()
	rec, ok := pin.ParseRecord(f.jobs[id], "g")
	must.True(t, ok, must.Sprintf("%s is not pinned", id))
	return rec.Nodes
}

// TestNomadRulesChooseTheNodes: a group is pinned only to nodes its job's
// own rules allow — its datacenters, its node pool, its task's driver —
// though the placement core would rather use another.
func TestNomadRulesChooseTheNodes(t *testing.T) {
	cases := []struct {
		name string
		node func(n1, n2 *api.Node)
		job  func(j *api.Job)
		want string
	}{
		{"datacenters", nil, func(j *api.Job) { j.Datacenters = []string{"dc2"} }, "node-2"},
		{"datacenter glob", nil, func(j *api.Job) { j.Datacenters = []string{"*2"} }, "node-2"},
		{"node pool", func(_, n2 *api.Node) { n2.NodePool = "gpu" }, func(j *api.Job) { j.NodePool = ptr("gpu") }, "node-2"},
		{"the default pool", func(n1, _ *api.Node) { n1.NodePool = "gpu" }, func(j *api.Job) { j.NodePool = ptr("default") }, "node-2"},
		{"driver", func(n1, _ *api.Node) { delete(n1.Drivers, "docker") }, func(j *api.Job) { j.TaskGroups[0].Tasks[0].Driver = "docker" }, "node-2"},
		{"unhealthy driver", func(n1, _ *api.Node) { n1.Drivers["docker"].Healthy = false }, func(j *api.Job) { j.TaskGroups[0].Tasks[0].Driver = "docker" }, "node-2"},
		{"a user's own node constraint", nil, func(j *api.Job) {
			j.Constraints = []*api.Constraint{{LTarget: "${node.unique.id}", Operand: "set_contains_any", RTarget: "node-2,node-9"}}
		}, "node-2"},
		{"device constraint", func(n1, _ *api.Node) {
			n1.NodeResources.Devices[0].Attributes["sharing"] = &api.Attribute{StringVal: ptr("timeslice")}
		}, func(j *api.Job) {
			dev := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			dev.Constraints = []*api.Constraint{{LTarget: "${device.attr.sharing}", Operand: "=", RTarget: "mps"}}
		}, "node-2"},
		{"no rule: the core's choice", nil, nil, "node-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := twoNodes(t)
			if tc.node != nil {
				tc.node(f.nodes[0], f.nodes[1])
			}
			for _, id := range []string{"a", "b", "c"} {
				j := gated(id, 25)
				if tc.job != nil {
					tc.job(j)
				}
				f.put(j)
			}
			s := newTestService(t, f)
			s.loop.reconcile(t.Context())
			for _, id := range []string{"a", "b", "c"} {
				must.Eq(t, []string{tc.want}, pinnedNodes(t, f, id))
			}
		})
	}
}

// TestAGroupNoNodeAllowsHoldsNothing: an adversary's job asking for a
// whole DGX-1 behind a constraint no node meets is not pinned and holds
// nothing; its reason names the constraint with Nomad's tally; a later
// job that needs those shares is pinned to them; and once a node meets the
// constraint the first one is decided again.
func TestAGroupNoNodeAllowsHoldsNothing(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1As(t, "node-1", "dc1")}, jobs: map[string]*api.Job{}}
	hog := gated("hog", 800)
	hog.SubmitTime = ptr(time.Unix(100, 0).UnixNano()) // waited longest
	hog.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"}}
	f.put(hog)
	later := gated("later", 800)
	later.SubmitTime = ptr(time.Unix(900, 0).UnixNano())
	f.put(later)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())

	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["hog"]))
	why := s.loop.answers.pending[key("hog")]
	must.StrContains(t, why, "no node the job's own rules allow")
	must.StrContains(t, why, "1 node filtered: constraint ${attr.kernel.name} = plan9 (1)")
	must.Eq(t, []string{"node-1"}, pinnedNodes(t, f, "later"))
	rec, _ := pin.ParseRecord(f.jobs["later"], "g")
	must.SliceLen(t, 800, rec.Shares)

	// checked again every pass: a plan9 node joins
	n2 := dgx1As(t, "node-2", "dc1")
	n2.Attributes["kernel.name"] = "plan9"
	f.nodes = append(f.nodes, n2)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"node-2"}, pinnedNodes(t, f, "hog"))
}

// TestRulesChangeReleasesAPinnedGroup: a pinned group still waiting for
// its allocation whose job is registered again with a constraint its
// pinned node fails is decided again (Nomad would never place it there),
// and its shares on that node are no longer held.
func TestRulesChangeReleasesAPinnedGroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
	}{{"another node meets it", 2}, {"no node meets it", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			f := twoNodes(t)
			f.nodes = f.nodes[:tc.nodes]
			f.put(gated("x", 25))
			s := newTestService(t, f)
			s.loop.reconcile(t.Context())
			must.Eq(t, []string{"node-1"}, pinnedNodes(t, f, "x"))
			must.MapContainsKey(t, held(s), "node-1") // held until its allocation appears

			// the user adds a constraint to the pinned job
			j, err := copyJob(f.jobs["x"])
			must.NoError(t, err)
			j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${node.datacenter}", Operand: "=", RTarget: "dc2"})
			f.put(j)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.mu.Lock()
			h := held(s)
			s.mu.Unlock()
			must.MapNotContainsKey(t, h, "node-1") // Nomad cannot place it there: nothing held
			s.loop.reconcile(t.Context())
			if tc.nodes == 2 {
				must.Eq(t, []string{"node-2"}, pinnedNodes(t, f, "x"))
				must.Eq(t, map[string]int{"node-2": 25}, held(s))
				return
			}
			must.StrContains(t, s.loop.answers.pending[key("x")], "constraint ${node.datacenter} = dc2 (1)")
			must.MapEmpty(t, held(s))
		})
	}
}

// held counts the shares the model holds for pinned groups, by node.
func held(s *Service) map[string]int {
	built := s.state.Snapshot(s.loop.profile, func(string) bool { return false })
	out := map[string]int{}
	for _, a := range built.Snapshot.Allocs() {
		if model.IsHold(a.ID) {
			out[a.Node] += len(a.Shares)
		}
	}
	return out
}

// TestRefusalDecidedAgainWhenTheAllowedNodesChange: a group refused for
// good because the nodes its rules allow can never hold it is decided
// again when those nodes change, though the cluster's shape does not.
func TestRefusalDecidedAgainWhenTheAllowedNodesChange(t *testing.T) {
	f := twoNodes(t)
	f.nodes[0].Meta["tier"] = "train"
	j := gated("pair", 800)
	j.TaskGroups[0].Count = ptr(2)
	j.Constraints = []*api.Constraint{{LTarget: "${meta.tier}", Operand: "=", RTarget: "train"}}
	f.put(j)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[key("pair")], "can never hold it")
	must.StrContains(t, s.loop.answers.pending[key("pair")], "on the 1 of 2 nodes the job's own rules allow")
	s.loop.reconcile(t.Context())
	must.Eq(t, 1.0, counterValue(t, s, `gpushare_decisions_total{outcome="never"}`))

	// node-2 is given the tier: same nodes, same GPUs, in the same order
	shape := clusterShape(s.state.Snapshot(s.loop.profile, func(string) bool { return false }).Snapshot)
	f.nodes[1].Meta["tier"] = "train"
	f.nodes[1].ModifyIndex++
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, shape, clusterShape(s.state.Snapshot(s.loop.profile, func(string) bool { return false }).Snapshot))
	s.loop.reconcile(t.Context())
	nodes := pinnedNodes(t, f, "pair")
	slices.Sort(nodes)
	must.Eq(t, []string{"node-1", "node-2"}, nodes)
}

// TestDistinctHostsSpreadsAGroup: a group of two fractions with
// distinct_hosts is pinned to two nodes, even when it asks to be packed
// (gpushare.replicas = "pack"); without it, the packed group is stacked
// on one GPU.
func TestDistinctHostsSpreadsAGroup(t *testing.T) {
	for _, distinct := range []bool{true, false} {
		f := twoNodes(t)
		j := gated("spread", 25)
		j.TaskGroups[0].Count = ptr(2)
		j.TaskGroups[0].Meta = map[string]string{pin.MetaReplicas: "pack"}
		if distinct {
			j.TaskGroups[0].Constraints = append(j.TaskGroups[0].Constraints, &api.Constraint{Operand: "distinct_hosts", RTarget: "true"})
		}
		f.put(j)
		s := newTestService(t, f)
		s.loop.reconcile(t.Context())
		want := []string{"node-1"}
		if distinct {
			want = []string{"node-1", "node-2"}
		}
		must.Eq(t, want, pinnedNodes(t, f, "spread"))
	}
}

// TestRunningGroupIsNeverTouched: a pinned group whose allocations all run
// is left alone when its job's rules change under it: nothing is missing,
// so nothing is decided again (Nomad decides what to do with them).
func TestRunningGroupIsNeverTouched(t *testing.T) {
	f, s, rec := pinnedX(t)
	f.allocs = append(f.allocs, &api.Allocation{ID: "x-0", Namespace: "default", JobID: "x", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index + 1,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
	j, err := copyJob(f.jobs["x"])
	must.NoError(t, err)
	j.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"}}
	f.put(j)
	version := *f.jobs["x"].Version
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version)
	must.MapNotContainsKey(t, s.loop.answers.pending, key("x"))
}

// A re-pin checks the user's own `${node.unique.id} set_contains_any`
// constraint: only the pin's own node constraint is left out of the
// group's rules, once.
func TestRepinKeepsTheUsersNodeRestriction(t *testing.T) {
	j := gated("x", 25)
	tg := j.TaskGroups[0]
	users := &api.Constraint{LTarget: pin.NodeAttribute, Operand: pin.OpSetContains, RTarget: "node-1,node-2"}
	tg.Constraints = append(tg.Constraints, users)
	d := &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "node-1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0"}},
	}}
	_, err := pin.Pin(j, "g", d)
	must.NoError(t, err)
	skip := skipFor(j, "g")
	var kept []string
	for _, c := range tg.Constraints {
		if !skip(feasible.LevelGroup, c) {
			kept = append(kept, c.RTarget)
		}
	}
	must.Eq(t, []string{"node-1,node-2"}, kept)

	// the user allows exactly the node the pin chose: one of the two stays
	same := gated("y", 25)
	same.TaskGroups[0].Constraints = append(same.TaskGroups[0].Constraints, &api.Constraint{LTarget: pin.NodeAttribute, Operand: pin.OpSetContains, RTarget: "node-1"})
	_, err = pin.Pin(same, "g", d)
	must.NoError(t, err)
	skip = skipFor(same, "g")
	kept = nil
	for _, c := range same.TaskGroups[0].Constraints {
		if !skip(feasible.LevelGroup, c) {
			kept = append(kept, c.RTarget)
		}
	}
	must.Eq(t, []string{"node-1"}, kept)
}
