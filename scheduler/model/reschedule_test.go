package model

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// failedAt is a failed allocation of group g of job etl whose task
// finished at t, rescheduled before at each of attempts.
func failedAt(id string, t time.Time, attempts ...time.Time) *api.Allocation {
	a := &api.Allocation{ID: id, Namespace: "default", JobID: "etl", TaskGroup: "g", DesiredStatus: "run", ClientStatus: "failed",
		TaskStates: map[string]*api.TaskState{"t": {State: "dead", Failed: true, StartedAt: t.Add(-time.Minute), FinishedAt: t}}}
	if attempts != nil {
		a.RescheduleTracker = &api.RescheduleTracker{}
		for _, at := range attempts {
			a.RescheduleTracker.Events = append(a.RescheduleTracker.Events, &api.RescheduleEvent{RescheduleTime: at.UnixNano(), PrevAllocID: "x"})
		}
	}
	return a
}

// batchJob is batch job etl of one group g of count, with reschedule
// policy p (nil: Nomad's defaults for batch, 1 attempt in 24h).
func batchJob(count int, p *api.ReschedulePolicy) *api.Job {
	return &api.Job{ID: ptr("etl"), Namespace: ptr("default"), Type: ptr("batch"), JobModifyIndex: ptr(uint64(10)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(count), ReschedulePolicy: p}}}
}

// A failed allocation of a batch job is one Nomad places no more (one of
// the count) exactly when Nomad's reconciler would not reschedule it: its
// policy disabled, or its attempts used up within the interval before it
// failed (measured from its failure, never from now), or its next delay
// past the interval. One with attempts left, forced to be rescheduled,
// stopped or evicted (Nomad ignores it), or already replaced is not.
func TestFailedForGoodIsWhatNomadDoesNotReschedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	with := func(a *api.Allocation, f func(*api.Allocation)) *api.Allocation { f(a); return a }
	for _, tc := range []struct {
		name string
		job  *api.Job
		a    *api.Allocation
		want bool
	}{
		{"default policy, never rescheduled: its one attempt is left", batchJob(2, nil), failedAt("a", t0), false},
		{"default policy, rescheduled an hour before it failed: used up", batchJob(2, nil), failedAt("a", t0, t0.Add(-time.Hour)), true},
		{"default policy, rescheduled 25h before it failed: out of the interval", batchJob(2, nil), failedAt("a", t0, t0.Add(-25*time.Hour)), false},
		{"attempts 0: rescheduling disabled", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(0)}), failedAt("a", t0), true},
		{"unlimited", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(true), DelayFunction: ptr("exponential"), MaxDelay: ptr(time.Hour)}), failedAt("a", t0, t0.Add(-time.Minute)), false},
		{"3 attempts in 1h, 2 made", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(3), Interval: ptr(time.Hour)}), failedAt("a", t0, t0.Add(-20*time.Minute), t0.Add(-10*time.Minute)), false},
		{"3 attempts in 1h, 3 made", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(3), Interval: ptr(time.Hour)}), failedAt("a", t0, t0.Add(-30*time.Minute), t0.Add(-20*time.Minute), t0.Add(-10*time.Minute)), true},
		{"exponential: the next delay (80m) past the interval (1h)", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(5), Interval: ptr(time.Hour),
			Delay: ptr(20 * time.Minute), DelayFunction: ptr("exponential"), MaxDelay: ptr(2 * time.Hour)}), failedAt("a", t0, t0.Add(-10*time.Minute), t0.Add(-5*time.Minute)), true},
		{"exponential: the next delay (40m) within the interval", batchJob(2, &api.ReschedulePolicy{Attempts: ptr(5), Interval: ptr(time.Hour),
			Delay: ptr(20 * time.Minute), DelayFunction: ptr("exponential"), MaxDelay: ptr(2 * time.Hour)}), failedAt("a", t0, t0.Add(-5*time.Minute)), false},
		{"the job's reschedule block disables it", jobWith(func(j *api.Job) { j.Reschedule = &api.ReschedulePolicy{Attempts: ptr(0)} }), failedAt("a", t0), true},
		{"no task finished: failed at its modify time", batchJob(2, nil), with(failedAt("a", t0, t0.Add(-time.Hour)), func(a *api.Allocation) {
			a.TaskStates, a.ModifyTime = nil, t0.UnixNano()
		}), true},
		{"replaced: its replacement counts", batchJob(2, nil), with(failedAt("a", t0, t0.Add(-time.Hour)), func(a *api.Allocation) { a.NextAllocation = "b" }), false},
		{"forced to be rescheduled", batchJob(2, nil), with(failedAt("a", t0, t0.Add(-time.Hour)), func(a *api.Allocation) {
			a.DesiredTransition.ForceReschedule = ptr(true)
		}), false},
		{"stopped: ignored, the count placed without it", batchJob(2, nil), with(failedAt("a", t0, t0.Add(-time.Hour)), func(a *api.Allocation) { a.DesiredStatus = "stop" }), false},
		{"evicted: ignored", batchJob(2, nil), with(failedAt("a", t0, t0.Add(-time.Hour)), func(a *api.Allocation) { a.DesiredStatus = "evict" }), false},
		{"sysbatch: never rescheduled", jobWith(func(j *api.Job) { j.Type = ptr("sysbatch") }), failedAt("a", t0), true},
		{"a service job's", jobWith(func(j *api.Job) { j.Type = ptr("service") }), failedAt("a", t0, t0.Add(-time.Hour)), false},
		{"complete, not failed", batchJob(2, nil), with(failedAt("a", t0), func(a *api.Allocation) { a.ClientStatus = "complete" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, FailedForGood(tc.a, tc.job))
			// what the model stores of it (slimmed), and what a listing gives
			st := New()
			st.PutJob(tc.job)
			st.PutAlloc(tc.a)
			must.Eq(t, tc.want, FailedForGood(st.Allocs["a"], tc.job), must.Sprint("stored"))
			if tc.a.DesiredTransition.ForceReschedule == nil {
				stub := &api.AllocationListStub{ID: tc.a.ID, Namespace: tc.a.Namespace, JobID: tc.a.JobID, TaskGroup: tc.a.TaskGroup,
					DesiredStatus: tc.a.DesiredStatus, ClientStatus: tc.a.ClientStatus, TaskStates: tc.a.TaskStates,
					NextAllocation: tc.a.NextAllocation, RescheduleTracker: tc.a.RescheduleTracker, ModifyTime: tc.a.ModifyTime}
				must.Eq(t, tc.want, FailedForGood(FromStub(stub), tc.job), must.Sprint("listed"))
			}
		})
	}
}

// A batch group of count 2 one of whose allocations completed and the
// other failed: with its attempts used up, the failed one is one of the
// count (Nomad places nothing more): nothing is missing and the group is
// done; with an attempt left it is missing (Nomad reschedules it, its
// shares stay held) and the group is not done; replaced, its replacement
// counts.
func TestMissingCountsAFailedAllocationNomadDoesNotReschedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	for _, tc := range []struct {
		name    string
		allocs  []*api.Allocation
		missing int
		done    bool
		ended   [2]int
	}{
		{"attempts used up", []*api.Allocation{failedAt("b", t0, t0.Add(-time.Hour))}, 0, true, [2]int{1, 1}},
		{"an attempt left", []*api.Allocation{failedAt("b", t0)}, 1, false, [2]int{1, 0}},
		{"an attempt left, after its delay", []*api.Allocation{failedAt("b", t0, t0.Add(-25*time.Hour))}, 1, false, [2]int{1, 0}},
		{"replaced, its replacement runs", []*api.Allocation{func() *api.Allocation { a := failedAt("b", t0); a.NextAllocation = "c"; return a }(),
			{ID: "c", Namespace: "default", JobID: "etl", TaskGroup: "g", DesiredStatus: "run", ClientStatus: "running", CreateIndex: 13, ModifyIndex: 13}}, 0, false, [2]int{1, 0}},
		{"replaced, its replacement failed for good", []*api.Allocation{func() *api.Allocation { a := failedAt("b", t0); a.NextAllocation = "c"; return a }(),
			failedAt("c", t0.Add(time.Minute), t0.Add(10*time.Second))}, 0, true, [2]int{1, 1}},
		{"of the version before, used up: ignored", []*api.Allocation{func() *api.Allocation {
			a := failedAt("b", t0, t0.Add(-time.Hour))
			a.CreateIndex, a.ModifyIndex = 5, 5
			return a
		}()}, 1, false, [2]int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := New()
			job := batchJob(2, nil)
			st.PutJob(job)
			st.PutAlloc(&api.Allocation{ID: "a", Namespace: "default", JobID: "etl", TaskGroup: "g", DesiredStatus: "run", ClientStatus: "complete", CreateIndex: 11, ModifyIndex: 11})
			for i, a := range tc.allocs {
				if a.CreateIndex == 0 {
					a.CreateIndex, a.ModifyIndex = uint64(12+i), uint64(12+i)
				}
				st.PutAlloc(a)
			}
			_, n := st.Missing(job, job.TaskGroups[0])
			must.Eq(t, tc.missing, n)
			must.Eq(t, tc.done, st.BatchDone(job, "g"))
			complete, failed := Ended(st, job, KeyOf(job, "g"))
			must.Eq(t, tc.ended, [2]int{complete, failed})
		})
	}
}

// jobWith is batchJob(2, nil) changed by f.
func jobWith(f func(*api.Job)) *api.Job {
	j := batchJob(2, nil)
	f(j)
	return j
}
