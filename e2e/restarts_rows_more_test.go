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

// quiet waits until job id has no evaluation pending (a reschedule
// waiting for its delay is one) and no allocation pending, then, under a
// scheduler, until it has decided on all that, and again.
func (e *env) quiet(id string, s *scheduler) {
	calm := func() bool {
		evals, _, err := e.nomad.Jobs().Evaluations(id, nil)
		if err != nil {
			return false
		}
		for _, ev := range evals {
			if ev.Status == api.EvalStatusPending {
				return false
			}
		}
		stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
		if err != nil {
			return false
		}
		for _, a := range stubs {
			if a.ClientStatus == api.AllocClientStatusPending && a.DesiredStatus == api.AllocDesiredStatusRun {
				return false
			}
		}
		return true
	}
	for range 2 {
		e.eventually(liveness, id+" quiet", calm)
		if s != nil {
			e.decidedSince(s)
		}
	}
	e.eventually(liveness, id+" quiet", calm)
}

// byStatus lists job id's allocations that failed, and those that run.
func (e *env) byStatus(id string) (failed, running []string) {
	stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
	must.NoError(e.t, err)
	for _, a := range stubs {
		switch {
		case a.ClientStatus == api.AllocClientStatusFailed:
			failed = append(failed, a.ID)
		case a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun:
			running = append(running, a.ID)
		}
	}
	return failed, running
}

// rowFailedBatch: a batch group of 3 whose allocation of index 0 exits 1
// while the two others run, under a batch job's default reschedule policy
// (1 attempt in 24h, after 5s): Nomad reschedules it once (the one
// allocation the failure needs), that one fails too and is failed for
// good; the two running stay. Then the same file registered again while
// they run: under Nomad alone nothing is created, the two stay. Under
// gpushare the two stay (updated in place), and the failed one is not run
// again: the pin written for the file is a new version of the job, and
// Nomad ignores the terminal allocations of an older version of a batch
// job, so the scheduler writes it with the count lowered by the names
// that ended (scheduler/service/batchended.go). The failure itself is
// measured, not asserted (measure): a re-pin between it and Nomad's
// delayed reschedule ran it a third time in 3 of 6 runs before nodePinRoom.
func (e *env) rowFailedBatch(prefix string, s *scheduler, add, measure func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	id := prefix + "fails"
	done := filepath.Join(e.dir, id+".done")
	spec := func() *api.Job {
		return e.rowJob(id, 25, 3, s != nil, func(j *api.Job) {
			j.Type = ptr("batch")
			j.Update, j.TaskGroups[0].Update, j.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
			j.TaskGroups[0].ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptr(1), Interval: ptr(24 * time.Hour),
				Delay: ptr(5 * time.Second), DelayFunction: ptr("constant"), MaxDelay: ptr(time.Duration(0)), Unlimited: ptr(false)}
			j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c",
				fmt.Sprintf(`[ "$NOMAD_ALLOC_INDEX" = 0 ] && exit 1; while [ ! -e %q ]; do sleep 1; done`, done)}
		})
	}
	e.registerJob(spec())
	var running []string
	e.eventually(liveness, id+": index 0 failed twice (rescheduled once), two running", func() bool {
		f, r := e.byStatus(id)
		running = r
		return len(f) == 2 && len(r) == 2
	})
	e.quiet(id, s)
	f, _ := e.byStatus(id)
	measure("a batch allocation that failed (count 3, 1 reschedule attempt)", len(e.allocIDs(id))-4, e.keptRunning(running[0]) && e.keptRunning(running[1]),
		fmt.Sprintf("index 0 failed %d times (Nomad's policy: twice, the first rescheduled once), job version %d; the two running kept", len(f), e.version(id)))

	seen, v := e.allocIDs(id), e.version(id)
	e.registerJob(spec())
	e.quiet(id, s)
	add("… the same batch jobspec registered again while it runs", e.createdSince(id, seen), e.keptRunning(running[0]) && e.keptRunning(running[1]),
		fmt.Sprintf("job version %d -> %d; created: %v", v, e.version(id), e.createdList(id, seen)))
	must.NoError(t, os.WriteFile(done, nil, 0o644))
	e.eventually(liveness, id+"'s two running to complete", func() bool {
		_, r := e.byStatus(id)
		return len(r) == 0
	})
	e.stopJobs(id)
}

// createdList names job id's allocations not in seen: name, job version,
// client status.
func (e *env) createdList(id string, seen map[string]bool) []string {
	stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
	must.NoError(e.t, err)
	var out []string
	for _, a := range stubs {
		if !seen[a.ID] {
			out = append(out, fmt.Sprintf("%s v%d %s", a.Name, a.JobVersion, a.ClientStatus))
		}
	}
	slices.Sort(out)
	return out
}

// rowCompletedBatchAgain: a batch group of 3 whose allocation of index 0
// completed while the two others run, then the same file registered
// again: under Nomad alone nothing is created (an unchanged job makes no
// new version) and the completed one is not run again; the two running
// stay. Under gpushare the pin written again is a new version, whose
// count the scheduler lowers by the name that completed, so Nomad places
// nothing: the same (e2e/TestBatchRegisteredAgain runs it through both
// `nomad job run` and `gpushare job run`).
func (e *env) rowCompletedBatchAgain(prefix string, s *scheduler, add func(string, int, bool, string)) {
	id := prefix + "part"
	done := filepath.Join(e.dir, id+".done")
	spec := func() *api.Job {
		return e.rowJob(id, 25, 3, s != nil, func(j *api.Job) {
			j.Type = ptr("batch")
			j.Update, j.TaskGroups[0].Update, j.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
			j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c",
				fmt.Sprintf(`[ "$NOMAD_ALLOC_INDEX" = 0 ] && exit 0; while [ ! -e %q ]; do sleep 1; done`, done)}
		})
	}
	e.registerJob(spec())
	running := e.oneCompleteTwoRun(id)
	e.quiet(id, s)
	seen, v := e.allocIDs(id), e.version(id)
	e.registerJob(spec())
	e.quiet(id, s)
	add("a batch group of 3, one completed: the same jobspec registered again while two run", e.createdSince(id, seen),
		e.keptRunning(running[0]) && e.keptRunning(running[1]), fmt.Sprintf("job version %d -> %d; created: %v", v, e.version(id), e.createdList(id, seen)))
	must.NoError(e.t, os.WriteFile(done, nil, 0o644))
	e.eventually(liveness, id+"'s running allocations to complete", func() bool {
		_, r := e.byStatus(id)
		return len(r) == 0
	})
	e.stopJobs(id)
}

// onNode constrains j's group to the node named name.
func onNode(j *api.Job, name string) {
	tg := j.TaskGroups[0]
	tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: "${node.unique.name}", Operand: "=", RTarget: name})
}

// rowNewVersionWaits: on pcie-2, three of whose GPUs an ungated job
// holds, a group of 2 x 50 shares runs on the fourth; a new version
// (rolling, max_parallel = 1) replaces them one at a time while another
// group of 50 shares on pcie-2 waits for that GPU. The rolling update
// creates its 2 replacements and nothing else: the holder's three stay,
// the waiting group is placed nowhere until the group stops, then runs.
func (e *env) rowNewVersionWaits(prefix string, gated bool, add func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	holder := e.rowJob(prefix+"holder", 100, 3, false, func(j *api.Job) { onNode(j, "pcie-2") })
	e.registerJob(holder)
	t.Cleanup(func() { e.stopJobs(*holder.ID) }) // a failed step leaves no GPU held
	held := e.running(*holder.ID, 3, liveness)
	id := prefix + "rolling"
	spec := func(version string) *api.Job {
		return e.rowJob(id, 50, 2, gated, func(j *api.Job) {
			onNode(j, "pcie-2")
			j.TaskGroups[0].Update.MaxParallel = ptr(1)
			j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
		})
	}
	e.registerJob(spec("1"))
	before := e.settled(id, 2)
	must.Eq(t, gpus(before[0]), gpus(before[1]))
	seen := e.allocIDs(id)
	e.registerJob(spec("2"))
	other := prefix + "waiting"
	e.registerJob(e.rowJob(other, 50, 1, gated, func(j *api.Job) { onNode(j, "pcie-2") }))
	after := e.settled(id, 2)
	ran := len(e.allocIDs(other))
	add("a new version waiting for Nomad to replace the old (rolling update, max_parallel 1, count 2)", e.createdSince(id, seen)-2,
		e.keptAll(held) && ran == 0, fmt.Sprintf("both replaced by its nature, on GPU %v of pcie-2; the holder's 3 kept; the waiting group's allocations: %d", gpus(after[0]), ran))
	must.Eq(t, 0, e.failedAllocs(id)+e.failedAllocs(other))
	e.stopJobs(id)
	e.running(other, 1, liveness) // the room let go is given to the group that waited
	e.stopJobs(other, *holder.ID)
}

// rowMixedCluster: a pin that waits only for its shares on the mixed
// cluster. A group of 3 whole GPUs runs on pcie-1..3 (pcie-4 lacks its
// driver) and is scaled 3 -> 1; ungated jobs take every GPU of pcie-1..3
// left; scaled 1 -> 3, within its pin's room, Nomad cannot place the two:
// the nodes it may use are exhausted, pcie-4 filtered for its driver. The
// pin is kept while it waits (the job's version unchanged), and once the
// ungated jobs stop the two are placed; the one left stays.
func (e *env) rowMixedCluster(prefix string, s *scheduler, add func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	id := prefix + "mixed"
	e.registerJob(e.rowJob(id, 100, 3, s != nil, nil))
	e.settled(id, 3)
	e.scale(id, 1)
	left := e.settled(id, 1)[0]
	filler := e.rowJob(prefix+"filler", 100, 11, false, nil)
	e.registerJob(filler)
	t.Cleanup(func() { e.stopJobs(*filler.ID) })
	e.running(*filler.ID, 11, liveness)

	seen := e.allocIDs(id)
	n, eval := 3, ""
	e.eventually(liveness, "nomad job scale "+id+" g 3 to be accepted", func() bool {
		resp, _, err := e.nomad.Jobs().Scale(id, "g", &n, "e2e: scaled", false, nil, nil)
		if err == nil {
			eval = resp.EvalID
		}
		return err == nil // refused while the deployment of 3 -> 1 is still marked running
	})
	var metric *api.AllocationMetric
	e.eventually(liveness, "Nomad to fail to place "+id+"'s scale", func() bool {
		ev, _, err := e.nomad.Evaluations().Info(eval, nil)
		if err != nil || ev.Status != api.EvalStatusComplete {
			return false
		}
		metric = ev.FailedTGAllocs["g"]
		return true
	})
	must.NotNil(t, metric, must.Sprint("Nomad placed the scale on GPUs the ungated jobs hold"))
	v := e.version(id)
	e.quiet(id, s)
	lifecycle := ""
	if s != nil {
		var js struct {
			Groups []struct {
				Lifecycle string `json:"lifecycle"`
				Why       string `json:"lifecycle_reason"`
			} `json:"groups"`
		}
		must.NoError(t, getJSON(s.http+"/v1/jobs/"+id, &js))
		must.SliceNotEmpty(t, js.Groups)
		lifecycle = fmt.Sprintf("; gpushare: %s (%s)", js.Groups[0].Lifecycle, js.Groups[0].Why)
	}
	waited := e.version(id)
	must.Eq(t, v, waited, must.Sprint("the pin waiting for its shares was written again"))
	must.Eq(t, 0, e.createdSince(id, seen), must.Sprint("placed on GPUs the ungated jobs hold"))
	e.stopJobs(*filler.ID)
	three := e.settled(id, 3)
	add("a pin waiting only for its shares, mixed cluster (scale 1 -> 3 within its room, every GPU held)", e.createdSince(id, seen)-2, e.keptRunning(left.ID),
		fmt.Sprintf("Nomad's evaluation: %d exhausted, filtered %v%s; 3 run on %s", metric.NodesExhausted, metric.ConstraintFiltered, lifecycle, strings.Join(nodesOf(three), ",")))
	e.stopJobs(id)
}

// rowStaged: a group of 2 whole GPUs allowed one node. Under gpushare on
// pcie-5 (device_groups = "model"): staged, a hold job holding the second
// GPU until Nomad placed the first. Under Nomad alone on pcie-2 (per
// GPU: Nomad alone on a per-model node would give an allocation shares
// of several GPUs). Registered again, both stay; scaled 2 -> 1 -> 2, the
// one left stays.
func (e *env) rowStaged(prefix string, s *scheduler, add func(string, int, bool, string)) {
	t := e.t.(*testing.T)
	id := prefix + "staged"
	j := e.rowJob(id, 100, 2, s != nil, func(j *api.Job) {
		if s != nil {
			j.Datacenters = []string{"dc2"}
		} else {
			onNode(j, "pcie-2")
		}
	})
	e.registerJob(j)
	two := e.settled(id, 2)
	must.Eq(t, two[0].NodeID, two[1].NodeID)
	must.NotEq(t, gpus(two[0]), gpus(two[1]))
	note := fmt.Sprintf("on %s, GPUs %v and %v", two[0].NodeName, gpus(two[0]), gpus(two[1]))
	if s != nil {
		must.SliceNotEmpty(t, e.holdJobs(), must.Sprint("staged behind a hold job"))
		e.eventually(liveness, "the holds let go", func() bool { return len(e.liveHoldJobs()) == 0 })
		rec, ok := pin.ParseRecord(e.jobInfo(id), "g")
		must.True(t, ok)
		note += fmt.Sprintf(", staged behind %d hold(s), pin contract %q", len(e.holdJobs()), rec.Contract)
	}
	add("count 2 x 1 GPU on one node (staged under gpushare): placed", len(e.allocIDs(id))-2, true, note)
	e.registeredAgain(j, two, add, "count 2 x 1 GPU on one node: the same jobspec registered again")

	seen := e.allocIDs(id)
	e.scale(id, 1)
	left := e.settled(id, 1)
	e.scale(id, 2)
	now := e.settled(id, 2)
	must.Eq(t, now[0].NodeID, now[1].NodeID)
	must.NotEq(t, gpus(now[0]), gpus(now[1]))
	add("count 2 x 1 GPU on one node: scale 2 -> 1 -> 2", e.createdSince(id, seen)-1, e.keptRunning(left[0].ID),
		fmt.Sprintf("%s kept; 2 run on %s", left[0].ID[:8], strings.Join(nodesOf(now), ",")))
	e.stopJobs(id)
}

// jobInfo reads job id.
func (e *env) jobInfo(id string) *api.Job {
	j, _, err := e.nomad.Jobs().Info(id, nil)
	must.NoError(e.t, err)
	return j
}
