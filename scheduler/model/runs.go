package model

import (
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/hashicorp/nomad/api"
)

// Learned run times. A batch group that declares no run time
// (gpushare.expected_runtime) is expected to take what its family's latest
// finished runs took (queue.Runs.Expected): the same group of the same
// job, or, for a child Nomad launched (a dispatch of a parameterized job,
// a launch of a periodic one), the same group of its parent, whose
// children are the same work run again. Only an allocation that finished
// on its own counts: complete, its tasks all successful, not stopped (a
// stop, a drain or a preemption ends it early, not its work). The runs are
// noted as allocations arrive (PutAlloc, from events and listings, whose
// stubs carry the task states of a complete allocation too), so the first
// pass after a restart learns every run Nomad still keeps; the service
// keeps them in its records (state.go, "runtimes") for the runs Nomad has
// collected since.

// RunsKey names the family whose runs a job's group learns from and adds
// to (decide.Key.String): its parent's group for a child, else its own.
func RunsKey(job *api.Job, group string) string {
	k := KeyOf(job, group)
	if job.ParentID != nil && *job.ParentID != "" {
		k.Job = *job.ParentID
	}
	return k.String()
}

// noteRun adds a's run to its family's runs when a finished on its own
// and its job, in the model, is a batch job (or sysbatch) of a namespace
// the scheduler manages. Its length is its tasks' first start to their
// last finish, less what sharing its GPU cost it (RunCost): a run time is
// declared alone, and one learned is too.
func (s *State) noteRun(a *api.Allocation) {
	if a.ClientStatus != api.AllocClientStatusComplete || a.DesiredStatus != api.AllocDesiredStatusRun {
		return
	}
	job := s.jobOf(a)
	if job == nil || job.Type == nil || (*job.Type != api.JobTypeBatch && *job.Type != api.JobTypeSysbatch) {
		return
	}
	start, end, ok := ranFor(a.TaskStates)
	if !ok || !s.Manages(a.Namespace) {
		return
	}
	took := end.Sub(start)
	if s.RunCost != nil {
		if cost := s.RunCost(a.ID); cost > 0 && cost < took {
			took -= cost // as it would have run alone
		}
	}
	key := RunsKey(job, a.TaskGroup)
	if runs, changed := s.Runs[key].With(queue.Run{Alloc: a.ID, Ended: end, Took: took}); changed {
		s.Runs[key] = runs
	}
}

// ranFor is when tasks that all finished successfully first started and
// last finished; false when one failed or a time is missing.
func ranFor(states map[string]*api.TaskState) (start, end time.Time, ok bool) {
	for _, ts := range states {
		if ts == nil || ts.Failed || ts.StartedAt.IsZero() || ts.FinishedAt.IsZero() {
			return start, end, false
		}
		if start.IsZero() || ts.StartedAt.Before(start) {
			start = ts.StartedAt
		}
		if ts.FinishedAt.After(end) {
			end = ts.FinishedAt
		}
	}
	return start, end, !start.IsZero() && end.After(start)
}

// RunsWanted reports whether the runs kept under key still belong to a
// job of the model: a family whose job is gone learns nothing more, and
// its runs are dropped (by the service, as learned profiles are).
func (s *State) RunsWanted(key string) bool {
	k, ok := decide.ParseKey(key)
	if !ok {
		return false
	}
	job := s.Jobs[JobKey(k.Namespace, k.Job)]
	return job != nil && pin.Group(job, k.Group) != nil
}
