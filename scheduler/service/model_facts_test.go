package service

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// markUnhealthy makes the plugin report GPU g of the node unhealthy (all
// its shares), as it does after a critical XID.
func markUnhealthy(t *testing.T, n *api.Node, g int) string {
	t.Helper()
	pn, err := model.NodeOf(n)
	must.NoError(t, err)
	uuid := pn.GPUs[g].UUID
	d := n.NodeResources.Devices[0]
	for _, gpu := range pn.GPUs {
		for k := range 100 {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: fmt.Sprintf("%s:%d", gpu.UUID, k), Healthy: gpu.UUID != uuid,
				HealthDescription: "XID 79: GPU has fallen off the bus"})
		}
	}
	n.ModifyIndex++
	return uuid
}

// An unhealthy GPU is never chosen: eight 100-share jobs on a DGX-1 with
// one GPU down, seven are placed, none on it.
func TestUnhealthyGPUIsNeverChosen(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	bad := markUnhealthy(t, f.nodes[0], 3)
	for i := range 8 {
		f.put(gated(fmt.Sprintf("j%d", i), 100))
	}
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	placed := 0
	for i := range 8 {
		if rec, ok := pin.ParseRecord(f.jobs[fmt.Sprintf("j%d", i)], "g"); ok && len(pin.Gated(f.jobs[fmt.Sprintf("j%d", i)])) == 0 {
			placed++
			must.SliceNotContains(t, rec.GPUs, bad)
		}
	}
	must.Eq(t, 7, placed)
}

// A pinned group whose GPU turns unhealthy before its allocation runs is
// pinned again on a healthy one.
func TestRepinWhenThePinnedGPUTurnsUnhealthy(t *testing.T) {
	f, s, rec := pinnedX(t)
	pn, _ := model.NodeOf(f.nodes[0])
	g := 0
	for i, gpu := range pn.GPUs {
		if gpu.UUID == rec.GPUs[0] {
			g = i
		}
	}
	markUnhealthy(t, f.nodes[0], g)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, _ := pin.ParseRecord(f.jobs["x"], "g")
	must.NotEq(t, rec.GPUs, again.GPUs)
}

// A periodic parent is a template: never pinned; a parameterized one is
// pinned to a pool for its dispatched children (TestParameterizedParentIsPinnedToAPool).
// Children (IDs with "/") that carry the gate are placed.
func TestChildrenArePlacedTemplatesNever(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	periodic := gated("nightly", 100)
	periodic.Type, periodic.Periodic = ptr("batch"), &api.PeriodicConfig{Enabled: ptr(true), Spec: ptr("@daily")}
	f.put(periodic)
	param := gated("render", 100)
	param.Type, param.ParameterizedJob = ptr("batch"), &api.ParameterizedJobConfig{}
	f.put(param)
	child := gated("render/dispatch-1700000000-abcd1234", 100)
	child.Type, child.ParentID = ptr("batch"), ptr("render")
	f.put(child)
	launched := gated("nightly/periodic-1700000000", 100)
	launched.Type, launched.ParentID = ptr("batch"), ptr("nightly")
	f.put(launched)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["nightly"]))
	must.SliceEmpty(t, pin.Gated(f.jobs["render"]), must.Sprint("pinned to a pool"))
	for _, id := range []string{"render/dispatch-1700000000-abcd1234", "nightly/periodic-1700000000"} {
		must.SliceEmpty(t, pin.Gated(f.jobs[id]), must.Sprintf("child %s", id))
		_, ok := pin.ParseRecord(f.jobs[id], "g")
		must.True(t, ok)
	}
	// the HTTP API and the confirmation keep the child's ID whole
	must.MapContainsKey(t, s.loop.unconfirmed.sent, key("render/dispatch-1700000000-abcd1234"))
}

// A finished batch group frees its pinned shares only in its own
// namespace: team-b's finished "train" does not release team-a's.
func TestBatchCompletionPerNamespace(t *testing.T) {
	st := model.New()
	for _, ns := range []string{"team-a", "team-b"} {
		j := gated("train", 100)
		j.Namespace, j.Type = ptr(ns), ptr("batch")
		st.PutJob(j)
	}
	st.PutAlloc(&api.Allocation{ID: "done-b", Namespace: "team-b", JobID: "train", TaskGroup: "g", ClientStatus: api.AllocClientStatusComplete, DesiredStatus: "run"})
	must.True(t, st.BatchDone(st.Jobs["team-b/train"], "g"))
	must.False(t, st.BatchDone(st.Jobs["team-a/train"], "g"))
}
