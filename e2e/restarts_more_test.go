package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// restartMoreOps are TestRestarts' operations of docs/lifecycle.md beyond
// restartOps' scales and lost capacity, on the same cluster, ungated
// (Nomad alone) when s is nil: each names the allocations that must stay
// and counts the allocations created beyond those the operation needs.
//   - the same jobspec registered again (a count-2 group), and again while
//     one of its nodes is ineligible: both allocations stay;
//   - nomad job revert to the version of a rolling update before (its
//     environment differs: both replaced, as by its nature), a stop and a
//     run again, a purge and a run again (a new job: both placed anew);
//   - a second child dispatched from a parameterized job: the first stays;
//   - a second child forced from a periodic job: the first stays;
//   - a batch group of 3, one of which completed: the two running stay,
//     the completed one is not run again; once all completed, the same
//     file applied again runs nothing, and with a new input runs all three
//     again;
//   - a re-pin after Nomad refused a pin (restartRefusal).
func (e *env) restartMoreOps(who, prefix string, s *scheduler, add func(op string, restarts int, kept bool, note string)) {
	t := e.t.(*testing.T)
	gated := s != nil
	start := time.Now()
	defer func() { t.Logf("%s: restartMoreOps took %s", who, time.Since(start).Round(time.Second)) }()

	// the same jobspec registered again, then again with a node ineligible
	id := prefix + "same"
	e.registerRestartJob(id, 2, true, gated)
	pair := e.settled(id, 2)
	for _, ineligible := range []bool{false, true} {
		seen, v := e.allocIDs(id), e.version(id)
		op, note := "the same jobspec registered again (count 2)", ""
		if ineligible {
			_, err := e.nomad.Nodes().ToggleEligibility(pair[0].NodeID, false, nil)
			must.NoError(t, err)
			op, note = "… while one of its nodes is ineligible", pair[0].NodeName+" ineligible; "
		}
		e.registerRestartJob(id, 2, true, gated)
		e.settled(id, 2)
		add(op, e.createdSince(id, seen), e.keptRunning(pair[0].ID) && e.keptRunning(pair[1].ID),
			fmt.Sprintf("%sjob version %d -> %d", note, v, e.version(id)))
	}
	_, err := e.nomad.Nodes().ToggleEligibility(pair[0].NodeID, true, nil)
	must.NoError(t, err)
	e.stopJobs(id)

	e.restartRevertStopPurge(prefix, gated, add)
	e.restartChildren(prefix, gated, add)
	e.restartBatch(prefix, s, add)
	e.restartRefusal(who, prefix, gated, add)
}

// restartRevertStopPurge measures nomad job revert, stop and run again,
// and purge and run again on a count-2 group: each replaces both
// allocations by its nature; restarts are any created beyond them.
func (e *env) restartRevertStopPurge(prefix string, gated bool, add func(op string, restarts int, kept bool, note string)) {
	t := e.t.(*testing.T)
	id := prefix + "roll"
	spec := func(version string) *api.Job {
		j := e.parse(id, map[string]any{"shares": 25, "count": 2})
		j.TaskGroups[0].Update.MaxParallel = ptr(1)
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
		if !gated {
			ungate(j)
		}
		return j
	}
	register := func(j *api.Job) {
		_, _, err := e.nomad.Jobs().Register(j, nil)
		must.NoError(t, err)
	}
	register(spec("1"))
	e.settled(id, 2)
	register(spec("2")) // a rolling update (measured by TestDeviceContract)
	e.settled(id, 2)
	versions, _, _, err := e.nomad.Jobs().Versions(id, false, nil)
	must.NoError(t, err)
	var target *uint64
	for _, v := range versions {
		if len(pin.Gated(v)) == 0 && v.TaskGroups[0].Tasks[0].Env["APP_VERSION"] == "1" && target == nil {
			target = v.Version // the newest such: Versions lists the newest first
		}
	}
	must.NotNil(t, target, must.Sprint("no placed version 1 to revert to"))
	seen := e.allocIDs(id)
	_, _, err = e.nomad.Jobs().Revert(id, *target, nil, nil, "", "")
	must.NoError(t, err)
	now := e.settled(id, 2)
	add("nomad job revert (count 2, to the version before a rolling update)", e.createdSince(id, seen)-2, true,
		fmt.Sprintf("to version %d; both replaced by its nature, on %s", *target, strings.Join(nodesOf(now), ",")))

	_, _, err = e.nomad.Jobs().Deregister(id, false, nil)
	must.NoError(t, err)
	e.eventually(liveness, id+"'s allocations to stop", func() bool { return len(e.runningNow(id)) == 0 })
	seen = e.allocIDs(id)
	register(spec("1"))
	now = e.settled(id, 2)
	add("nomad job stop, then run again (count 2)", e.createdSince(id, seen)-2, true, "both placed anew by its nature, on "+strings.Join(nodesOf(now), ","))

	seen = e.allocIDs(id)
	_, _, err = e.nomad.Jobs().Deregister(id, true, nil)
	must.NoError(t, err)
	e.eventually(liveness, id+" to be purged", func() bool {
		_, _, err := e.nomad.Jobs().Info(id, nil)
		return err != nil && strings.Contains(err.Error(), "404")
	})
	e.eventually(liveness, id+"'s allocations to stop", func() bool { return len(e.runningNow(id)) == 0 })
	register(spec("1"))
	now = e.settled(id, 2)
	add("purge, then run again (count 2)", e.createdSince(id, seen)-2, true, "a new job: both placed anew, on "+strings.Join(nodesOf(now), ","))
	e.stopJobs(id)
}

// restartChildren measures a second child of a parameterized job
// (dispatched) and of a periodic one (forced): the first child's
// allocation stays, and each child creates one allocation.
func (e *env) restartChildren(prefix string, gated bool, add func(op string, restarts int, kept bool, note string)) {
	t := e.t.(*testing.T)
	parent := func(id string, edit func(j *api.Job)) {
		p := e.parse(id, map[string]any{"shares": 25})
		p.Type = ptr("batch")
		p.Update, p.TaskGroups[0].Update, p.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		edit(p)
		if !gated {
			ungate(p)
		}
		_, _, err := e.nomad.Jobs().Register(p, nil)
		must.NoError(t, err)
	}
	created := func(children []string) int {
		n := 0
		for _, c := range children {
			n += len(e.allocIDs(c))
		}
		return n - len(children)
	}

	id := prefix + "infer"
	parent(id, func(j *api.Job) { j.ParameterizedJob = &api.ParameterizedJobConfig{Payload: "optional"} })
	if gated { // a child dispatched before its parent's pool waits for good
		e.eventually(liveness, id+" pinned to a pool", func() bool {
			j, _, err := e.nomad.Jobs().Info(id, nil)
			_, ok := pin.ParseRecord(j, "g")
			return err == nil && ok && len(pin.Gated(j)) == 0
		})
	}
	var children []string
	dispatch := func() *api.Allocation {
		resp, _, err := e.nomad.Jobs().Dispatch(id, nil, nil, "", nil)
		must.NoError(t, err)
		children = append(children, resp.DispatchedJobID)
		return e.running(resp.DispatchedJobID, 1, liveness)[0]
	}
	first := dispatch()
	second := dispatch()
	add("nomad job dispatch of a second child", created(children), e.keptRunning(first.ID),
		fmt.Sprintf("children on %s and %s", first.NodeName, second.NodeName))
	e.stopJobs(append(children, id)...)

	id = prefix + "nightly"
	parent(id, func(j *api.Job) {
		j.Periodic = &api.PeriodicConfig{Enabled: ptr(true), SpecType: ptr("cron"), Spec: ptr("0 3 1 1 *"), ProhibitOverlap: ptr(false)}
	})
	children = nil
	force := func() *api.Allocation {
		// a forced child is named by its launch's second: one force a second
		for forced := time.Now().Unix(); time.Now().Unix() == forced; {
			time.Sleep(50 * time.Millisecond)
		}
		_, _, err := e.nomad.Jobs().PeriodicForce(id, nil)
		must.NoError(t, err)
		var a *api.Allocation
		e.eventually(liveness, "a new child of "+id+" to run", func() bool {
			jobs, _, err := e.nomad.Jobs().PrefixList(id + "/periodic-")
			if err != nil {
				return false
			}
			for _, j := range jobs {
				if !slices.Contains(children, j.ID) {
					if now := e.runningNow(j.ID); len(now) == 1 {
						children, a = append(children, j.ID), now[0]
						return true
					}
				}
			}
			return false
		})
		return a
	}
	first = force()
	second = force()
	add("nomad job periodic force of a second child", created(children), e.keptRunning(first.ID),
		fmt.Sprintf("children on %s and %s", first.NodeName, second.NodeName))
	e.stopJobs(append(children, id)...)
}

// restartBatch measures a batch group of 3 one of which completed (the two
// running stay, nothing runs again), then, once all three completed, the
// same file applied again (nothing runs), then the job run again with a
// new input (the three run again).
func (e *env) restartBatch(prefix string, s *scheduler, add func(op string, restarts int, kept bool, note string)) {
	t := e.t.(*testing.T)
	id := prefix + "etl"
	done := filepath.Join(e.dir, id+".done")
	input := "day-1"
	spec := func() *api.Job {
		j := e.parse(id, map[string]any{"shares": 25, "count": 3})
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"INPUT": input}
		j.Type = ptr("batch")
		j.Update, j.TaskGroups[0].Update, j.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c",
			fmt.Sprintf(`[ "$NOMAD_ALLOC_INDEX" = 0 ] && exit 0; while [ ! -e %q ]; do sleep 1; done`, done)}
		if s == nil {
			ungate(j)
		}
		return j
	}
	register := func() string {
		resp, _, err := e.nomad.Jobs().Register(spec(), nil)
		must.NoError(t, err)
		return resp.EvalID
	}
	statuses := func() (complete, running []string) {
		stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
		must.NoError(t, err)
		for _, a := range stubs {
			switch {
			case a.ClientStatus == api.AllocClientStatusComplete:
				complete = append(complete, a.ID)
			case a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun:
				running = append(running, a.ID)
			}
		}
		return complete, running
	}
	register()
	var running []string
	e.eventually(liveness, id+": one allocation complete, two running", func() bool {
		c, r := statuses()
		running = r
		return len(c) == 1 && len(r) == 2
	})
	if s != nil { // the scheduler has decided on the completion
		e.decidedSince(s)
	}
	add("a batch group of 3, one completed", len(e.allocIDs(id))-3, e.keptRunning(running[0]) && e.keptRunning(running[1]),
		"the completed one not run again")

	must.NoError(t, os.WriteFile(done, nil, 0o644))
	e.eventually(liveness, id+": all three complete", func() bool {
		c, r := statuses()
		return len(c) == 3 && len(r) == 0
	})
	seen, v := e.allocIDs(id), e.version(id)
	eval := register()
	if s != nil {
		e.eventually(liveness, "the scheduler to say "+id+" registered again unchanged is done", func() bool {
			var js struct {
				Groups []struct {
					Lifecycle string `json:"lifecycle"`
					Why       string `json:"lifecycle_reason"`
				} `json:"groups"`
			}
			return getJSON(s.http+"/v1/jobs/"+id, &js) == nil && len(js.Groups) > 0 &&
				js.Groups[0].Lifecycle == "done" && strings.Contains(js.Groups[0].Why, "registered again unchanged")
		})
		e.decidedSince(s)
	} else if eval != "" {
		e.eventually(liveness, "the evaluation of "+id+" registered again", func() bool {
			ev, _, err := e.nomad.Evaluations().Info(eval, nil)
			return err == nil && ev.Status == api.EvalStatusComplete
		})
	}
	add("the same batch jobspec applied again after its run ended", e.createdSince(id, seen), true,
		fmt.Sprintf("job version %d -> %d; nothing ran", v, e.version(id)))

	// run again under the same ID with a new input: all three by its nature
	seen, input = e.allocIDs(id), "day-2"
	register()
	e.eventually(liveness, id+": its second run to complete", func() bool {
		c, r := statuses()
		return len(c) >= 6 && len(r) == 0
	})
	add("a batch job run again under the same ID (a new input, count 3)", e.createdSince(id, seen)-3, true, "all three run again by its nature")
	e.stopJobs(id)
}

// decidedSince waits until scheduler s has finished a pass on what Nomad
// said up to now.
func (e *env) decidedSince(s *scheduler) {
	var h struct{ Index, Decided uint64 }
	must.NoError(e.t, getJSON(s.http+"/v1/health", &h))
	at := h.Index
	e.eventually(liveness, "the scheduler to decide on index "+fmt.Sprint(at), func() bool {
		return getJSON(s.http+"/v1/health", &h) == nil && h.Decided >= at
	})
}
