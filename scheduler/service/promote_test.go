package service

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// manualCanary is a gated job of two allocations of 25 shares whose group
// deploys with one canary that waits for a promote (auto_promote = false).
func manualCanary(id string) *api.Job {
	j := gated(id, 25)
	j.TaskGroups[0].Count = ptr(2)
	j.TaskGroups[0].Update = &api.UpdateStrategy{Canary: ptr(1), AutoPromote: ptr(false), MaxParallel: ptr(1)}
	return j
}

// promoteScene is a manual-canary job pinned on two of three DGX-1s,
// running, whose first allocation's node is then lost: the pass pins it
// again (a new version), and Nomad places a canary of it beside the
// survivor, with a deployment that waits for a promote.
type promoteScene struct {
	f *fakeNomad
	s *Service
	d *api.Deployment
}

func newPromoteScene(t *testing.T) *promoteScene {
	t.Helper()
	nodes := []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1"), dgx1As(t, "node-3", "dc1")}
	f, s, rec := placedFirst(t, manualCanary("manual"), nodes...)
	must.Eq(t, 2, len(rec.Nodes))
	lost := rec.Nodes[0]
	f.mu.Lock()
	v1, err := copyJob(f.jobs["manual"])
	must.NoError(t, err)
	for i, n := range rec.Nodes {
		f.index++
		f.allocs = append(f.allocs, &api.Allocation{ID: fmt.Sprintf("alloc-%d", i), Namespace: "default", JobID: "manual", TaskGroup: "g", NodeID: n, Job: v1,
			DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares[i*25 : (i+1)*25]}}}}}})
	}
	f.index++
	f.allocs[0].ClientStatus, f.allocs[0].DesiredStatus, f.allocs[0].ModifyIndex = "lost", "stop", f.index
	for _, n := range f.nodes {
		if n.ID == lost {
			n.Status = "down"
		}
	}
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, ok := pin.ParseRecord(f.jobs["manual"], "g")
	must.True(t, ok)
	must.SliceNotContains(t, again.Nodes, lost, must.Sprint("not pinned again off the lost node"))
	return &promoteScene{f: f, s: s, d: canaryDeployed(t, f, "manual", again)}
}

// canaryDeployed has Nomad place one canary of job id's current version
// on rec's first node, and its deployment wait for a promote, the canary
// not healthy yet.
func canaryDeployed(t *testing.T, f *fakeNomad, id string, rec *pin.Record) *api.Deployment {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	job := f.jobs[id]
	f.index++
	cur, err := copyJob(job)
	must.NoError(t, err)
	canary := &api.Allocation{ID: "canary-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: rec.Nodes[0], Job: cur,
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		DeploymentStatus: &api.AllocDeploymentStatus{Canary: true},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares[:25]}}}}}}
	f.allocs = append(f.allocs, canary)
	d := &api.Deployment{ID: "d-" + id + "-0123456789", Namespace: "default", JobID: id, JobVersion: *job.Version, JobCreateIndex: *job.CreateIndex,
		Status: api.DeploymentStatusRunning, TaskGroups: map[string]*api.DeploymentState{
			"g": {DesiredCanaries: 1, DesiredTotal: 2, PlacedCanaries: []string{canary.ID}, PlacedAllocs: 1}}}
	if f.deployments == nil {
		f.deployments = map[string]*api.Deployment{}
	}
	f.deployments[id] = d
	return d
}

// healthy marks the deployment's canaries healthy.
func (sc *promoteScene) healthy() {
	sc.f.mu.Lock()
	defer sc.f.mu.Unlock()
	sc.d.TaskGroups["g"].HealthyAllocs = 1
}

func (sc *promoteScene) pass(t *testing.T) {
	t.Helper()
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	sc.s.loop.reconcile(t.Context())
}

// (a) A group deployed with canaries that wait for a promote, pinned again
// after its node is lost: the new pin is the only change, so the scheduler
// promotes the deployment itself once its canary is healthy, not before,
// counts it and says so; it is promoted once. Without it, the group would
// stay short of its count until someone promotes
// (e2e/TestLifecycleOperations/lost_node).
func TestRepinOfAManualCanaryGroupIsPromotedOnceHealthy(t *testing.T) {
	sc := newPromoteScene(t)
	sc.pass(t)
	must.SliceEmpty(t, sc.f.promoted, must.Sprint("promoted before its canary was healthy"))
	must.StrContains(t, stageOf(sc.s, "manual").Why, "promotes deployment d-manual once they are healthy")
	must.Eq(t, 0.0, counterValue(t, sc.s, "gpushare_promotions_total"))

	sc.healthy()
	sc.pass(t)
	must.Eq(t, []string{sc.d.ID}, sc.f.promoted)
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_promotions_total"))
	must.StrContains(t, stageOf(sc.s, "manual").Why, "gpushare promoted deployment d-manual")

	sc.pass(t) // promoted: not again
	must.Eq(t, 1, len(sc.f.promoted))
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_promotions_total"))
}

// (b) A version the user changed (a new env), deployed with canaries that
// wait for a promote, is never promoted by the scheduler, though the
// scheduler pinned it and its canary is healthy: the canary is the user's.
func TestUsersChangedVersionIsNeverPromoted(t *testing.T) {
	f, s, rec := placedFirst(t, manualCanary("mine"))
	f.runningOn("mine", "alloc-1", rec.Shares[:25])
	f.runningOn("mine", "alloc-2", rec.Shares[25:50])
	v1, err := copyJob(f.jobs["mine"])
	must.NoError(t, err)
	for _, a := range f.allocs {
		a.Job = v1
	}
	changed := manualCanary("mine")
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": "2"}
	f.put(changed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	next, ok := pin.ParseRecord(f.jobs["mine"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("mine")]))
	sc := &promoteScene{f: f, s: s, d: canaryDeployed(t, f, "mine", next)}
	sc.healthy()
	for range 3 {
		sc.pass(t)
	}
	must.SliceEmpty(t, f.promoted, must.Sprint("the user's canary was promoted by the scheduler"))
	must.Eq(t, 0.0, counterValue(t, s, "gpushare_promotions_total"))
	must.StrNotContains(t, stageOf(s, "mine").Why, "gpushare promote")
}

// (c) A follower never promotes, even a deployment of the scheduler's own
// pin whose canary is healthy; once it leads, it does.
func TestFollowerNeverPromotes(t *testing.T) {
	sc := newPromoteScene(t)
	sc.healthy()
	sc.s.lease.need.Store(true) // campaigns, holds no lease
	sc.pass(t)
	sc.pass(t)
	must.SliceEmpty(t, sc.f.promoted, must.Sprint("a follower promoted"))
	must.Eq(t, 0.0, counterValue(t, sc.s, "gpushare_promotions_total"))

	sc.s.lease.end.Store(time.Now().Add(time.Minute).UnixNano()) // leads now
	sc.pass(t)
	must.Eq(t, []string{sc.d.ID}, sc.f.promoted)
}

// (d) A promote Nomad refuses is said in the group's reason and tried
// again by the next pass, which promotes it; the pass is not held up.
func TestFailedPromoteIsRetriedNextPass(t *testing.T) {
	sc := newPromoteScene(t)
	sc.healthy()
	sc.f.promoteErr = errors.New("Unexpected response code: 500 (no leader)")
	sc.pass(t)
	must.SliceEmpty(t, sc.f.promoted)
	why := stageOf(sc.s, "manual").Why
	must.StrContains(t, why, "promoting deployment d-manual failed (tried again next pass)")
	must.StrContains(t, why, "no leader")
	must.Eq(t, 0.0, counterValue(t, sc.s, "gpushare_promotions_total"))

	sc.f.mu.Lock()
	sc.f.promoteErr = nil
	sc.f.mu.Unlock()
	sc.pass(t)
	must.Eq(t, []string{sc.d.ID}, sc.f.promoted)
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_promotions_total"))
}
