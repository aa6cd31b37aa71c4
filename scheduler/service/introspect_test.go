package service

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// statsNomad is the fake Nomad with device stats and stopped allocations.
type statsNomad struct {
	*fakeNomad
	mu      sync.Mutex
	sm      map[string]int64 // process SM utilisation of each share
	stopped []string
	// statsErr and stopErr, when set, are what Nomad answers to a read of
	// device stats and to a stop.
	statsErr, stopErr error
}

func (f *statsNomad) DeviceStats(context.Context, string) ([]*api.DeviceGroupStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statsErr != nil {
		return nil, f.statsErr
	}
	g := &api.DeviceGroupStats{Vendor: "nvidia", Type: "gpushare", Name: "Tesla V100-SXM2-16GB", InstanceStats: map[string]*api.DeviceStats{}}
	for id, v := range f.sm {
		g.InstanceStats[id] = &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			statProcessSM: {IntNumeratorVal: ptr(v), IntDenominatorVal: ptr(int64(100)), Unit: "%"}}}}
	}
	return []*api.DeviceGroupStats{g}, nil
}

func (f *statsNomad) StopAlloc(_ context.Context, id string) error {
	if f.stopErr != nil {
		return f.stopErr
	}
	f.stopped = append(f.stopped, id)
	return nil
}

// report sets the process SM utilisation of every share of a record.
func (f *statsNomad) report(rec *pin.Record, pct int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sh := range rec.Shares {
		f.sm[sh] = pct
	}
}

// pairScene is a DGX-1 where the service paired two production jobs
// declaring sm_util 0.5 on one GPU under a bound of 0.5 (room for the
// model's uncertainty): "old" started first, "new" a minute later.
type pairScene struct {
	f        *statsNomad
	s        *Service
	clock    *time.Time
	old, new *pin.Record
	// meta is added to each job's meta (set before the jobs run)
	meta map[string]string
}

func newPairScene(t *testing.T, edit ...func(*config.Config)) *pairScene {
	t.Helper()
	return newPairSceneWith(t, nil, edit...)
}

// newPairSceneWith is newPairScene with meta added to both jobs'.
func newPairSceneWith(t *testing.T, meta map[string]string, edit ...func(*config.Config)) *pairScene {
	t.Helper()
	f := &statsNomad{fakeNomad: &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}, sm: map[string]int64{}}
	cfg := config.Default()
	cfg.ProductionMaxSlowdown = 0.5
	cfg.Introspection.Window = "6s"
	for _, e := range edit {
		e(cfg)
	}
	must.NoError(t, cfg.Validate())
	clock := time.Unix(100000, 0)
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return clock })
	must.NoError(t, err)
	sc := &pairScene{f: f, s: s, clock: &clock, meta: meta}
	sc.old = sc.run(t, "old", clock.Add(-time.Hour))
	sc.new = sc.run(t, "new", clock.Add(-time.Minute))
	must.Eq(t, sc.old.GPUs, sc.new.GPUs) // packed: the model sees no interference
	return sc
}

// run registers a gated production job, lets the service pin it, and
// gives it a running allocation on its pinned shares.
func (sc *pairScene) run(t *testing.T, id string, started time.Time) *pin.Record {
	t.Helper()
	j := gated(id, 25)
	j.Meta[pin.MetaClass], j.Meta[pin.MetaSMUtil], j.Meta[pin.MetaMemBW] = "production", "0.5", "0.1"
	maps.Copy(j.Meta, sc.meta)
	sc.f.put(j)
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	sc.s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(sc.f.jobs[id], "g")
	must.True(t, ok, must.Sprintf("%s pinned", id))
	sc.f.index++
	sc.f.allocs = append(sc.f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: sc.f.index, CreateIndex: sc.f.index,
		TaskStates: map[string]*api.TaskState{"t": {State: "running", StartedAt: started}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	return rec
}

// sample takes one introspection sample per value, window/samples apart,
// with old's processes at each value and new's at 50%.
func (sc *pairScene) sample(t *testing.T, old ...int64) {
	t.Helper()
	for _, v := range old {
		sc.f.report(sc.old, v)
		sc.f.report(sc.new, 50)
		sc.s.sampler.introspectSample(t.Context())
		*sc.clock = sc.clock.Add(sc.s.cfg.IntrospectionWindow() / 2)
	}
}

// A production job observed at 0.4 of its speed alone next to another,
// below its bound of 0.5: the newer of the two is stopped and its group
// gated again, the pair is remembered incompatible on the GPU model, and
// the next decision places the moved job on another GPU.
func TestUnpairSlowPair(t *testing.T) {
	sc := newPairScene(t)
	var steps [][]decide.Action
	sc.s.loop.onStep = func(a []decide.Action) { steps = append(steps, a) }
	sc.sample(t, 20, 20) // 2 samples: not judged yet
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	sc.sample(t, 20)
	sc.s.loop.reconcile(t.Context())

	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	must.SliceNotEmpty(t, pin.Gated(sc.f.jobs["new"]))
	must.SliceEmpty(t, pin.Gated(sc.f.jobs["old"]))
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_unpairs_total"))
	last := steps[len(steps)-1]
	must.Eq(t, decide.Unpair, last[0].Kind)
	must.StrContains(t, last[0].Reason, "0.40x")
	must.True(t, sc.s.loop.intro.know.Incompatible("Tesla V100-SXM2-16GB", profileOf("old"), profileOf("new")))
	// the pair, not every job that declares the same fractions
	must.False(t, sc.s.loop.intro.know.Incompatible("Tesla V100-SXM2-16GB", profileOf("old"), profileOf("other")))

	// the job API says why
	rr := httptest.NewRecorder()
	sc.s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/jobs/new", nil))
	var st JobStatus
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &st))
	must.NotNil(t, st.Groups[0].Unpaired)
	must.StrContains(t, st.Groups[0].Unpaired.Reason, "below its bound")
	rr = httptest.NewRecorder()
	sc.s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/unpairs", nil))
	var list []Unpaired
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &list))
	must.SliceLen(t, 1, list)
	must.Eq(t, "new", list[0].Job)

	// Nomad stops the allocation; the gated group is placed again, not
	// next to old on any GPU of that model
	sc.f.allocs = slices.DeleteFunc(sc.f.allocs, func(a *api.Allocation) bool { return a.ID == "alloc-new" })
	sc.f.index++
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	sc.s.loop.reconcile(t.Context())
	again, ok := pin.ParseRecord(sc.f.jobs["new"], "g")
	must.True(t, ok)
	must.SliceEmpty(t, pin.Gated(sc.f.jobs["new"]))
	must.NotEq(t, sc.old.GPUs, again.GPUs)
}

// Samples whose spread covers the bound do nothing: the step acts only
// when the observation plus its uncertainty is below the bound.
func TestUnpairNotWithinUncertainty(t *testing.T) {
	sc := newPairScene(t)
	sc.sample(t, 5, 40, 20) // mean 0.43 of alone, but ±0.2
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	must.SliceEmpty(t, pin.Gated(sc.f.jobs["new"]))
	run := sc.s.loop.running(sc.s.state.Snapshot(sc.s.loop.profile, nil).Snapshot, sc.s.loop.now())
	must.Less(t, 0.5, run["alloc-old"].Norm)
	must.Greater(t, 0.5, run["alloc-old"].Norm+run["alloc-old"].Err)
}

// A good pair is left alone, and observed into the knowledge once per
// window.
func TestGoodPairObserved(t *testing.T) {
	sc := newPairScene(t)
	sc.sample(t, 50, 48, 52)
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	mean, n := sc.s.loop.intro.know.cur().Observed("Tesla V100-SXM2-16GB", profileOf("old"), profileOf("new"))
	must.Eq(t, 1, n) // old with new; new with old is its own
	must.Eq(t, 1.0, mean)
	_, n = sc.s.loop.intro.know.cur().Observed("Tesla V100-SXM2-16GB", profileOf("new"), profileOf("old"))
	must.Eq(t, 1, n)
	sc.s.loop.reconcile(t.Context())
	_, n = sc.s.loop.intro.know.cur().Observed("Tesla V100-SXM2-16GB", profileOf("old"), profileOf("new"))
	must.Eq(t, 1, n)
}

// A follower samples nothing, so its step never unpairs.
func TestUnpairFollowerDoesNotAct(t *testing.T) {
	sc := newPairScene(t)
	sc.s.lease.need.Store(true) // campaigning, without the lease
	sc.sample(t, 20, 20, 20)
	must.MapEmpty(t, sc.s.loop.intro.shared)
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	must.SliceEmpty(t, pin.Gated(sc.f.jobs["new"]))
}

// The incompatible pair, the observations and the reason survive a
// change of leader through the scheduler's Nomad Variables.
func TestUnpairRecordsPersist(t *testing.T) {
	sc := newPairScene(t)
	must.NoError(t, sc.s.records.loadState(t.Context(), true))
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	must.MapNotEmpty(t, sc.f.vars[introspectionVar])

	next, err := newService(sc.s.cfg, hclog.NewNullLogger(), sc.f, sc.s.loop.now)
	must.NoError(t, err)
	must.NoError(t, next.watcher.resync(t.Context()))
	must.NoError(t, next.records.loadState(t.Context(), true))
	must.True(t, next.loop.intro.know.Incompatible("Tesla V100-SXM2-16GB", profileOf("new"), profileOf("old")))
	_, n := next.loop.intro.know.cur().Observed("Tesla V100-SXM2-16GB", profileOf("old"), profileOf("new"))
	must.Eq(t, 1, n)
	must.NotNil(t, next.loop.intro.lastUnpaired(key("new")))
}

// A pairing is judged on its latest window: one that turns slow is
// unpaired although it ran well before.
func TestUnpairJudgesTheLatestWindow(t *testing.T) {
	sc := newPairScene(t)
	sc.sample(t, 50, 50, 50, 50, 50, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
}

// Stats that Nomad cannot serve are no samples: nothing is judged on them,
// and the window fills again once they can be read.
func TestUnpairStatsUnreadable(t *testing.T) {
	sc := newPairScene(t)
	sc.f.statsErr = errors.New("Unexpected response code: 500 (node unreachable)")
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	must.SliceEmpty(t, pin.Gated(sc.f.jobs["new"]))
	sc.f.statsErr = nil
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
}

// A stop Nomad refuses is no unpairing: not counted, not reported, and
// the next pass tries again.
func TestUnpairStopFailsRetries(t *testing.T) {
	sc := newPairScene(t)
	sc.f.stopErr = errors.New("Unexpected response code: 503 (no leader)")
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	must.Eq(t, 0.0, counterValue(t, sc.s, "gpushare_unpairs_total"))
	must.Nil(t, sc.s.loop.intro.lastUnpaired(key("new")))
	sc.f.stopErr = nil
	sc.sample(t, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_unpairs_total"))
	must.NotNil(t, sc.s.loop.intro.lastUnpaired(key("new")))
}

// With introspection off, nothing is judged and the policy predicts with
// the model alone.
func TestIntrospectionOff(t *testing.T) {
	sc := newPairScene(t, func(c *config.Config) { c.Introspection.Enabled = ptr(false) })
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.SliceEmpty(t, sc.f.stopped)
	must.Nil(t, sc.s.loop.intro.predictor(sc.s.cfg.IntrospectionOn()))
}

// profileOf is the profile the pair scene's jobs declare, as the service
// knows it: their fractions, kept apart per group.
func profileOf(job string) interference.Profile {
	return interference.Profile{SM: 0.5, MemBW: 0.1, ID: key(job).String()}
}

// What sharing costs an allocation is charged at each judgement: the time
// since the one before, weighted by one less its observed throughput
// (old at 0.5 of alone: half of it). A pass that does not judge it (its
// partner gone: alone) stops the clock, so its time alone is not charged.
// The step reads it as a share of the group's declared run time
// (decide.Input.Stretched), none for a group that declares none.
func TestWhatSharingCostsIsCharged(t *testing.T) {
	sc := newPairScene(t)
	sc.sample(t, 25, 25, 25)
	sc.s.loop.reconcile(t.Context()) // the first judgement starts the clock
	must.MapEmpty(t, sc.s.loop.intro.lostToSharing())
	*sc.clock = sc.clock.Add(time.Minute)
	sc.sample(t, 25, 25, 25)
	sc.s.loop.reconcile(t.Context())
	lost := sc.s.loop.intro.lostToSharing()
	// a minute and the three samples (9 s) since, at 0.5 of alone: 69 s x 0.5
	must.Eq(t, 34500*time.Millisecond, lost["alloc-old"])
	must.Eq(t, 0*time.Second, lost["alloc-new"], must.Sprint("new runs at its speed alone"))

	sc.s.loop.mu.Lock()
	must.MapEmpty(t, sc.s.loop.stretched(), must.Sprint("no run time declared"))
	key := model.JobKey("default", "old")
	declared := *sc.s.loop.state.Jobs[key] // a new version that declares one
	declared.Meta = maps.Clone(declared.Meta)
	declared.Meta[pin.MetaExpected] = "10m"
	declared.ModifyIndex = ptr(*declared.ModifyIndex + 1)
	sc.s.loop.state.Jobs[key] = &declared
	must.Eq(t, 34.5/600, sc.s.loop.stretched()["alloc-old"])
	sc.s.loop.mu.Unlock()

	// alone for an hour (its partner's samples stop), then judged again:
	// only the time since counts, and while it runs alone its expected end
	// reads its speed alone, not the throughput it had shared
	must.Eq(t, 0.5, sc.s.loop.intro.progress()["alloc-old"].norm)
	sc.s.loop.intro.mu.Lock()
	sc.s.loop.intro.settle(sc.s.loop.state, placement.NewSnapshot(), map[string]bool{})
	sc.s.loop.intro.mu.Unlock()
	must.Eq(t, 0.0, sc.s.loop.intro.progress()["alloc-old"].norm)
	*sc.clock = sc.clock.Add(time.Hour)
	sc.sample(t, 25, 25, 25)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, 34500*time.Millisecond, sc.s.loop.intro.lostToSharing()["alloc-old"])
}

// A follower samples nothing, so it charges nothing: what sharing cost is
// the leader's. An allocation gone from the model is forgotten.
func TestWhatSharingCostsIsTheLeadersAndForgotten(t *testing.T) {
	sc := newPairScene(t)
	sc.s.lease.need.Store(true) // campaigning, without the lease
	for range 2 {
		sc.sample(t, 25, 25, 25)
		sc.s.loop.reconcile(t.Context())
		*sc.clock = sc.clock.Add(time.Minute)
	}
	must.MapEmpty(t, sc.s.loop.intro.lostToSharing())

	sc.s.lease.need.Store(false)
	for range 2 {
		sc.sample(t, 25, 25, 25)
		sc.s.loop.reconcile(t.Context())
		*sc.clock = sc.clock.Add(time.Minute)
	}
	must.MapContainsKey(t, sc.s.loop.intro.lostToSharing(), "alloc-old")

	sc.s.loop.mu.Lock()
	delete(sc.s.loop.state.Allocs, "alloc-old")
	sc.s.loop.intro.mu.Lock()
	sc.s.loop.intro.settle(sc.s.loop.state, placement.NewSnapshot(), map[string]bool{})
	sc.s.loop.intro.mu.Unlock()
	sc.s.loop.mu.Unlock()
	must.MapNotContainsKey(t, sc.s.loop.intro.lostToSharing(), "alloc-old")
}

// A time-sliced job is slower by its turns, not by a pairing: nothing is
// charged to what sharing costs it (decide leaves it out of MaxStretch).
func TestTurnsAreNotChargedToSharing(t *testing.T) {
	sc := newPairSceneWith(t, map[string]string{pin.MetaTimeslice: "true"})
	for range 2 {
		sc.sample(t, 25, 25, 25)
		sc.s.loop.reconcile(t.Context())
		*sc.clock = sc.clock.Add(time.Minute)
	}
	must.MapEmpty(t, sc.s.loop.intro.lostToSharing()) // TestWhatSharingCostsIsCharged: 34.5 s without the opt-in
}
