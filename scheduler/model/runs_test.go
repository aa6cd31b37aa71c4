package model

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// runsJob is a gated job with one group "g" of a quarter GPU, of the
// given type, with meta (nil: none).
func runsJob(id, typ string, meta map[string]string) *api.Job {
	name, ns := "g", "default"
	return &api.Job{ID: &id, Name: &id, Namespace: &ns, Type: &typ, Meta: meta,
		TaskGroups: []*api.TaskGroup{{Name: &name, Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptrU(25)}}}}}}}}
}

// ranAlloc is an allocation of job's group g that ran took, ending at end,
// with the given client and desired status.
func ranAlloc(id string, job *api.Job, end time.Time, took time.Duration, client, desired string) *api.Allocation {
	return &api.Allocation{ID: id, Namespace: "default", JobID: *job.ID, TaskGroup: "g", ClientStatus: client, DesiredStatus: desired,
		ModifyIndex: 10, TaskStates: map[string]*api.TaskState{
			"t":    {State: "dead", StartedAt: end.Add(-took), FinishedAt: end},
			"side": {State: "dead", StartedAt: end.Add(-took / 2), FinishedAt: end.Add(-time.Minute)},
		}}
}

func expectedOf(t *testing.T, s *State, job *api.Job) (time.Duration, int) {
	t.Helper()
	r, err := s.Request(job, "g", interference.Default())
	must.NoError(t, err)
	return r.Expected, r.LearnedFrom
}

// A batch group that declares no run time is expected to take what its
// finished runs took; a declared one keeps its own.
func TestARunTimeIsLearnedFromFinishedRuns(t *testing.T) {
	s := New()
	end := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	job := runsJob("etl", api.JobTypeBatch, nil)
	s.PutJob(job)
	d, n := expectedOf(t, s, job)
	must.EqOp(t, 0, d)
	must.EqOp(t, 0, n)

	s.PutAlloc(ranAlloc("a1", job, end, 2*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	d, n = expectedOf(t, s, job)
	must.EqOp(t, 2*time.Hour, d, must.Sprint("the first task's start to the last finish"))
	must.EqOp(t, 1, n)
	s.PutAlloc(ranAlloc("a2", job, end.Add(time.Hour), 4*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	s.PutAlloc(ranAlloc("a3", job, end.Add(2*time.Hour), 3*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	d, n = expectedOf(t, s, job)
	must.EqOp(t, 3*time.Hour, d)
	must.EqOp(t, 3, n)

	// what does not count: a stopped allocation (a stop, a drain, a
	// preemption ended it, not its work), a failed task, a run still going
	stopped := ranAlloc("s1", job, end.Add(3*time.Hour), time.Minute, api.AllocClientStatusComplete, api.AllocDesiredStatusStop)
	failed := ranAlloc("f1", job, end.Add(3*time.Hour), time.Minute, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)
	failed.TaskStates["t"].Failed = true
	running := ranAlloc("r1", job, end.Add(3*time.Hour), time.Minute, api.AllocClientStatusRunning, api.AllocDesiredStatusRun)
	running.TaskStates["t"].FinishedAt = time.Time{}
	for _, a := range []*api.Allocation{stopped, failed, running} {
		s.PutAlloc(a)
	}
	_, n = expectedOf(t, s, job)
	must.EqOp(t, 3, n)

	// a run that shared its GPU counts as it would have run alone: what
	// sharing cost it is netted (a cost past its run is not believed)
	s.RunCost = func(id string) time.Duration {
		return map[string]time.Duration{"a4": time.Hour, "a5": 9 * time.Hour}[id]
	}
	s.PutAlloc(ranAlloc("a4", job, end.Add(3*time.Hour), 5*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	s.PutAlloc(ranAlloc("a5", job, end.Add(4*time.Hour), 8*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	runs := s.Runs["default/etl/g"]
	must.EqOp(t, 4*time.Hour, runs[len(runs)-2].Took)
	must.EqOp(t, 8*time.Hour, runs[len(runs)-1].Took)
	d, n = expectedOf(t, s, job)
	must.EqOp(t, 4*time.Hour, d, must.Sprint("2, 3, 4, 4, 8 hours"))
	must.EqOp(t, 5, n)

	// declared: the declaration, not the runs
	declared := runsJob("etl", api.JobTypeBatch, map[string]string{pin.MetaExpected: "90m"})
	d, n = expectedOf(t, s, declared)
	must.EqOp(t, 90*time.Minute, d)
	must.EqOp(t, 0, n)

	// a service's allocations that complete (stopped by hand, or exited)
	// are no run time of anything
	svc := runsJob("web", api.JobTypeService, nil)
	s.PutJob(svc)
	s.PutAlloc(ranAlloc("w1", svc, end, time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	d, _ = expectedOf(t, s, svc)
	must.EqOp(t, 0, d)
}

// The children Nomad launches (dispatches of a parameterized job, launches
// of a periodic one) learn from and add to their parent's runs, and the
// runs of a listing after a restart count as those of events.
func TestChildrenLearnFromTheirFamily(t *testing.T) {
	s := New()
	end := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	parent := runsJob("train", api.JobTypeBatch, nil)
	parent.ParameterizedJob = &api.ParameterizedJobConfig{}
	s.PutJob(parent)
	child := func(id string) *api.Job {
		c := runsJob(id, api.JobTypeBatch, nil)
		c.ParentID, c.Dispatched, c.ParameterizedJob = parent.ID, true, &api.ParameterizedJobConfig{}
		return c
	}
	c1, c2 := child("train/dispatch-1"), child("train/dispatch-2")
	s.PutJob(c1)
	s.PutAlloc(ranAlloc("c1a", c1, end, 5*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun))
	// a listing's stub of the second child's finished allocation
	s.PutJob(c2)
	a := ranAlloc("c2a", c2, end.Add(time.Hour), 7*time.Hour, api.AllocClientStatusComplete, api.AllocDesiredStatusRun)
	s.PutAlloc(FromStub(&api.AllocationListStub{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, TaskGroup: a.TaskGroup,
		ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, TaskStates: a.TaskStates, ModifyIndex: a.ModifyIndex}))

	must.MapContainsKey(t, s.Runs, "default/train/g")
	c3 := child("train/dispatch-3")
	s.PutJob(c3)
	d, n := expectedOf(t, s, c3)
	must.EqOp(t, 6*time.Hour, d)
	must.EqOp(t, 2, n)

	must.True(t, s.RunsWanted("default/train/g"))
	must.False(t, s.RunsWanted("default/train/other"), must.Sprint("no such group"))
	s.DeleteJob("default", "train")
	must.False(t, s.RunsWanted("default/train/g"), must.Sprint("the family's job is gone"))
	must.False(t, s.RunsWanted("not a key"))
}

// Namespaces are walls: a job of the same ID in another namespace is
// another family, and a namespace the scheduler does not manage adds
// nothing.
func TestRunsStayInTheirNamespace(t *testing.T) {
	s := New()
	s.Managed = func(ns string) bool { return ns != "theirs" }
	end := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	for _, ns := range []string{"default", "team-b", "theirs"} {
		job := runsJob("etl", api.JobTypeBatch, nil)
		job.Namespace = &ns
		s.PutJob(job)
		a := ranAlloc("run-"+ns, job, end, map[string]time.Duration{"default": time.Hour, "team-b": 5 * time.Hour, "theirs": 9 * time.Hour}[ns],
			api.AllocClientStatusComplete, api.AllocDesiredStatusRun)
		a.Namespace = ns
		s.PutAlloc(a)
	}
	must.Eq(t, []string{"default/etl/g", "team-b/etl/g"}, slices.Sorted(maps.Keys(s.Runs)))
	must.EqOp(t, time.Hour, s.Runs["default/etl/g"].Expected())
	must.EqOp(t, 5*time.Hour, s.Runs["team-b/etl/g"].Expected())
}
