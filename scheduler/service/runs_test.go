package service

import (
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A batch job that declares no run time is ordered, and told it waits,
// by what its earlier run took; the leader keeps the run in its records,
// so that a new leader knows it after Nomad has collected the finished
// allocation. A declared run time wins over the learned one.
func TestARunTimeLearnedOutlivesNomadsGarbageCollection(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "b", []int{0}, 0, "2h")
	// the version that ran, and its run, three hours long
	yesterday := gated("big", 800)
	yesterday.Type, yesterday.Meta["data"] = ptr(api.JobTypeBatch), "2026-11-29"
	f.put(yesterday)
	end := time.Unix(500, 0)
	earlier := &api.Allocation{ID: "big-yesterday", Namespace: "default", JobID: "big", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusComplete,
		CreateIndex: f.index, AllocModifyIndex: f.index, ModifyIndex: f.index + 1, Job: f.jobs["big"],
		TaskStates: map[string]*api.TaskState{"t": {State: "dead", StartedAt: end.Add(-3 * time.Hour), FinishedAt: end}}}
	f.allocs = append(f.allocs, earlier)
	// the pipeline registers it again with today's data
	big := gated("big", 800)
	big.Type, big.Meta["data"] = ptr(api.JobTypeBatch), "2026-11-30"
	big.SubmitTime = ptr(time.Unix(880, 0).UnixNano()) // 2 minutes before the clock's now
	f.put(big)
	now := time.Unix(1000, 0)
	s := clocked(t, f, &now)
	s.loop.reconcile(t.Context()) // reads the pin its last run was placed with
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["big"]))
	// 2 minutes of 3 hours: the ratio of 1.01, not the default hour's 1.03
	must.StrContains(t, s.loop.answers.pending[key("big")],
		"; position 1 of 1 in the queue (response ratio 1.01, expected run time 3h0m0s as its last run took)")
	st, ok := s.view.jobStatus("default", "big", "default")
	must.True(t, ok)
	must.Eq(t, &ExpectedRuntime{Seconds: 3 * 3600, Source: "learned", Runs: 1}, st.Groups[0].Expected)
	rr := uiServe(s, "GET", "/ui/jobs/big?namespace=default", "", nil)
	must.StrContains(t, rr.Body.String(), "<dt>Expected run time</dt><dd>3h0m0s, learned: what its last run took</dd>")
	s.records.saveState(t.Context())
	must.MapContainsKey(t, f.vars, runsKind.path(0))

	// Nomad collects the finished allocation; the next leader reads the
	// run from the records
	f.allocs = slices.DeleteFunc(f.allocs, func(a *api.Allocation) bool { return a == earlier })
	next := clocked(t, f, &now)
	next.mu.Lock()
	must.Eq(t, 3*time.Hour, next.state.Runs["default/big/g"].Expected())
	next.mu.Unlock()
	next.loop.reconcile(t.Context())
	must.StrContains(t, next.loop.answers.pending[key("big")], "expected run time 3h0m0s as its last run took")

	// declared: the declaration orders it
	declared := f.jobs["big"]
	declared.Meta[pin.MetaExpected] = "20m"
	declared.ModifyIndex, declared.JobModifyIndex = ptr(uint64(100)), ptr(uint64(100))
	f.put(declared)
	again := clocked(t, f, &now)
	again.loop.reconcile(t.Context())
	must.StrContains(t, again.loop.answers.pending[key("big")], "; position 1 of 1 in the queue (response ratio 1.10)")
	st, _ = again.view.jobStatus("default", "big", "default")
	must.Eq(t, &ExpectedRuntime{Seconds: 20 * 60, Source: "declared"}, st.Groups[0].Expected)

	// the job is gone: its runs go from the records
	delete(f.jobs, "big")
	gone := clocked(t, f, &now)
	gone.records.saveState(t.Context())
	must.MapEmpty(t, f.vars[runsKind.path(0)])
}

// A run that shared its GPU is learned as it would have run alone: the
// service nets what introspection charged to sharing, or, for a
// time-sliced allocation, the turns it waited.
func TestARunIsLearnedNetOfWhatSharingCostIt(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	job := gated("etl", 25)
	job.Type = ptr(api.JobTypeBatch)
	f.put(job)
	now := time.Unix(100000, 0)
	s := clocked(t, f, &now)
	s.loop.intro.mu.Lock()
	s.loop.intro.lost["shared"] = &lostTally{lost: 90 * time.Minute}
	s.loop.intro.mu.Unlock()
	s.loop.history.SetTimeslices([]gpuhistory.AllocTimeslice{{Alloc: "sliced",
		Timeslice: gpuhistory.Timeslice{Quantum: 2 * time.Second, Suspended: 3 * time.Hour, Turns: 900}}})
	end := time.Unix(90000, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range []string{"shared", "alone", "sliced"} {
		s.state.PutAlloc(&api.Allocation{ID: id, Namespace: "default", JobID: "etl", TaskGroup: "g", ModifyIndex: 5,
			DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusComplete,
			TaskStates: map[string]*api.TaskState{"t": {State: "dead", StartedAt: end.Add(-4 * time.Hour), FinishedAt: end}}})
	}
	took := map[string]time.Duration{}
	for _, r := range s.state.Runs["default/etl/g"] {
		took[r.Alloc] = r.Took
	}
	must.Eq(t, map[string]time.Duration{"shared": 150 * time.Minute, "alone": 4 * time.Hour, "sliced": time.Hour}, took)
}

// Records of runs that do not parse are skipped, the others read, and a
// run read that this replica saw already counts once.
func TestRunsReadSkipTheBad(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	now := time.Unix(100000, 0)
	s := clocked(t, f, &now)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records.readRuns(map[string]string{
		"a": `["default/etl/g", [["r1", 1000, 3600], ["r2", 2000, 7200], ["bad", "x", 1]]]`,
		"b": `not json`,
		"c": `["", [["r3", 1000, 60]]]`,
		"d": `["default/etl/g", "no runs"]`,
	})
	s.records.readRuns(map[string]string{"a": `["default/etl/g", [["r2", 2000, 7200]]]`})
	must.MapLen(t, 1, s.state.Runs)
	must.Eq(t, queue.Runs{{Alloc: "r1", Ended: time.Unix(1000, 0), Took: time.Hour}, {Alloc: "r2", Ended: time.Unix(2000, 0), Took: 2 * time.Hour}},
		s.state.Runs["default/etl/g"])
}
