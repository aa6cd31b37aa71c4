package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestLifecycleOperations: what Nomad does to a placed job after its
// placement, on a real Nomad with the real plugin and scheduler (issue
// 28), on three clients in two datacenters. Each operation ends with every allocation running within the
// liveness bound; where an allocation must not be restarted, its ID is
// checked.
//   - scaled past its pin (nomad job scale, as the Autoscaler does), the
//     group is pinned again and all its allocations run; scaled down, and
//     back up within its pin, what runs is left alone;
//   - a changed version with a canary and auto_promote is placed beside
//     the running allocations and the deployment succeeds;
//   - a rolling update, `nomad job revert` to the first pinned version, and
//     a stop followed by a new run each end with the group running;
//   - a drained node's group runs again on the other node of its
//     datacenter, never in the other datacenter;
//   - a periodic child (nomad job periodic force) is pinned and runs;
//   - a gated parameterized job is pinned to a pool of GPUs; five children
//     dispatched from it, which Nomad never lets be registered again, are
//     placed by Nomad inside the pool, each on one GPU, and run;
//   - a canary with auto_promote = false runs beside the running
//     allocations until the test promotes the deployment (nomad deployment
//     promote): the user's change is never promoted by the scheduler; the
//     deployment succeeds and the promoted canary is kept;
//   - a rolling update of three allocations with max_parallel 1 finishes
//     with all three of the new version;
//   - a periodic job's children launched by its cron (a seconds field),
//     never forced, are pinned and complete; the parent is then stopped;
//   - a batch job whose run completed, registered again from the same
//     file, does not run again (Nomad alone makes no new version of it);
//     with a new input it does;
//   - a job purged and registered again from the same spec is placed anew,
//     under a pin signed for its new incarnation;
//   - last, as it leaves the cluster a node short: a node lost (pcie-2's
//     agent killed): its groups are pinned again on the surviving nodes, a
//     dc1 group on pcie-1, and run again; allocations of jobs that had none
//     on pcie-2 keep their IDs; gpushare_restarts_total{reason="repin"}
//     counts the surviving allocations a new pin replaces; a group whose
//     canaries wait for a promote (auto_promote = false) gets canaries of
//     the new pin, which the scheduler promotes itself once they are
//     healthy (the pin is the only change), counted in
//     gpushare_promotions_total; the test promotes nothing.
func TestLifecycleOperations(t *testing.T) {
	start := time.Now()
	e := newLifecycleEnv(t)
	s := e.startScheduler("s1", "")
	t.Logf("cluster and scheduler ready in %s", time.Since(start).Round(time.Second))

	t.Run("scale", func(t *testing.T) {
		e := e.in(t)
		e.register("web", map[string]any{"shares": 25})
		first := e.settled("web", 1)[0]
		scale := func(n int) {
			// Nomad refuses to scale while a deployment runs ("job scaling
			// blocked due to active deployment"): the Autoscaler retries,
			// and so does this
			e.eventually(liveness, fmt.Sprintf("nomad job scale web g %d to be accepted", n), func() bool {
				_, _, err := e.nomad.Jobs().Scale("web", "g", &n, "e2e: scaled", false, nil, nil)
				return err == nil
			})
		}
		scale(3)
		three := e.settled("web", 3)
		job, _, err := e.nomad.Jobs().Info("web", nil)
		must.NoError(t, err)
		rec, ok := pin.ParseRecord(job, "g")
		must.True(t, ok)
		must.Eq(t, 3, rec.Count)
		restarted := !slices.ContainsFunc(three, func(a *api.Allocation) bool { return a.ID == first.ID })
		t.Logf("scaled 1 -> 3: 3 running, pinned for 3 on %v; the first allocation restarted: %v", rec.Nodes, restarted)

		scale(1)
		one := e.settled("web", 1)
		must.True(t, slices.ContainsFunc(three, func(a *api.Allocation) bool { return a.ID == one[0].ID }),
			must.Sprint("scaling down restarted the allocation that stays"))
		scale(2)
		two := e.settled("web", 2)
		must.True(t, slices.ContainsFunc(two, func(a *api.Allocation) bool { return a.ID == one[0].ID }),
			must.Sprint("scaling back up within the pin restarted what ran"))
		t.Logf("scaled 3 -> 1 -> 2 within the pin: no restart")
	})

	t.Run("canary with auto_promote", func(t *testing.T) {
		e := e.in(t)
		spec := func(version string) *api.Job {
			j := e.parse("api", map[string]any{"shares": 25, "count": 2})
			u := j.TaskGroups[0].Update
			u.Canary, u.AutoPromote, u.MaxParallel = ptr(1), ptr(true), ptr(1)
			j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
			return j
		}
		_, _, err := e.nomad.Jobs().Register(spec("1"), nil)
		must.NoError(t, err)
		e.running("api", 2, liveness)
		_, _, err = e.nomad.Jobs().Register(spec("2"), nil)
		must.NoError(t, err)
		e.eventually(liveness, "the canary deployment of version 2 to succeed", func() bool {
			job, _, err := e.nomad.Jobs().Info("api", nil)
			if err != nil || len(pin.Gated(job)) > 0 {
				return false
			}
			d, _, err := e.nomad.Jobs().LatestDeployment("api", nil)
			if err != nil || d == nil || d.JobVersion != *job.Version || d.Status != api.DeploymentStatusSuccessful {
				return false
			}
			n := 0
			for _, a := range e.runningNow("api") {
				if a.Job.TaskGroups[0].Tasks[0].Env["APP_VERSION"] == "2" {
					n++
				}
			}
			return n == 2
		})
		t.Logf("canary deployment of version 2 successful: 2 allocations of it run")
	})

	t.Run("rolling update, revert, stop and run again", func(t *testing.T) {
		e := e.in(t)
		spec := func(version string) *api.Job {
			j := e.parse("roll", map[string]any{"shares": 25, "count": 2})
			j.TaskGroups[0].Update.MaxParallel = ptr(1)
			j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
			return j
		}
		register := func(j *api.Job) {
			_, _, err := e.nomad.Jobs().Register(j, nil)
			must.NoError(t, err)
		}
		register(spec("1"))
		v1 := e.settled("roll", 2)
		register(spec("2"))
		v2 := e.settled("roll", 2)
		for _, a := range v2 {
			must.Eq(t, "2", a.Job.TaskGroups[0].Tasks[0].Env["APP_VERSION"])
		}
		t.Logf("rolling update: 2 allocations of version 2 run, on %v (version 1 ran on %v)", gpusOf(v2), gpusOf(v1))

		// revert to the version the first pin was written into
		versions, _, _, err := e.nomad.Jobs().Versions("roll", false, nil)
		must.NoError(t, err)
		var target uint64
		found := false
		for _, v := range versions {
			if len(pin.Gated(v)) == 0 && v.TaskGroups[0].Tasks[0].Env["APP_VERSION"] == "1" {
				target, found = *v.Version, true
			}
		}
		must.True(t, found, must.Sprint("no pinned version 1 to revert to"))
		_, _, err = e.nomad.Jobs().Revert("roll", target, nil, nil, "", "")
		must.NoError(t, err)
		reverted := e.settled("roll", 2)
		for _, a := range reverted {
			must.Eq(t, "1", a.Job.TaskGroups[0].Tasks[0].Env["APP_VERSION"])
		}
		t.Logf("nomad job revert to version %d: 2 allocations of it run", target)

		_, _, err = e.nomad.Jobs().Deregister("roll", false, nil)
		must.NoError(t, err)
		e.eventually(liveness, "the stopped job's allocations to stop", func() bool { return len(e.runningNow("roll")) == 0 })
		register(spec("3"))
		e.settled("roll", 2)
		t.Logf("stopped, then run again: 2 allocations run")
	})

	t.Run("drain", func(t *testing.T) {
		e := e.in(t)
		j := e.parse("drained", map[string]any{"shares": 25})
		j.Datacenters = []string{"dc1"} // pcie-1 and pcie-2, not pcie-3
		_, _, err := e.nomad.Jobs().Register(j, nil)
		must.NoError(t, err)
		before := e.settled("drained", 1)[0]
		_, err = e.nomad.Nodes().UpdateDrainOpts(before.NodeID, &api.DrainOptions{
			DrainSpec: &api.DrainSpec{Deadline: time.Minute}, MarkEligible: false}, nil)
		must.NoError(t, err)
		t.Cleanup(func() {
			_, _ = e.nomad.Nodes().UpdateDrainOpts(before.NodeID, &api.DrainOptions{DrainSpec: nil, MarkEligible: true}, nil)
		})
		var after *api.Allocation
		e.eventually(liveness, "the drained allocation to run again on another node", func() bool {
			now := e.runningNow("drained")
			if len(now) != 1 || now[0].NodeID == before.NodeID {
				return false
			}
			after = now[0]
			return true
		})
		must.NotEq(t, "pcie-3", after.NodeName, must.Sprint("moved out of the job's datacenter"))
		t.Logf("drained %s: the group runs again on %s, in its datacenter", before.NodeName, after.NodeName)
	})

	t.Run("periodic force", func(t *testing.T) {
		// a periodic child carries no periodic block: it is registered
		// again like any job, so it is pinned; its parent never is
		e := e.in(t)
		p := e.parse("nightly", map[string]any{"shares": 25})
		p.Type = ptr("batch")
		p.Periodic = &api.PeriodicConfig{Enabled: ptr(true), SpecType: ptr("cron"), Spec: ptr("0 3 1 1 *"), ProhibitOverlap: ptr(false)}
		p.Update, p.TaskGroups[0].Update, p.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		_, _, err := e.nomad.Jobs().Register(p, nil)
		must.NoError(t, err)
		_, _, err = e.nomad.Jobs().PeriodicForce("nightly", nil)
		must.NoError(t, err)
		var child string
		e.eventually(liveness, "a child of nightly to run", func() bool {
			jobs, _, err := e.nomad.Jobs().PrefixList("nightly/periodic-")
			if err != nil || len(jobs) == 0 {
				return false
			}
			child = jobs[0].ID
			return len(e.runningNow(child)) == 1
		})
		parent, _, err := e.nomad.Jobs().Info("nightly", nil)
		must.NoError(t, err)
		must.Eq(t, []string{"g"}, pin.Gated(parent), must.Sprint("the parent, a template, is never pinned"))
		t.Logf("nomad job periodic force: child %s runs", child)
	})

	t.Run("dispatch", func(t *testing.T) { lifecycleDispatch(t, e, s) })

	t.Run("canary promoted by hand", func(t *testing.T) { lifecycleCanaryPromotedByHand(t, e, s) })

	t.Run("rolling update with max_parallel", func(t *testing.T) { lifecycleRollingUpdateWithMaxParallel(t, e, s) })

	t.Run("cron-launched periodic children", func(t *testing.T) { lifecycleCronLaunchedPeriodicChildren(t, e, s) })

	t.Run("batch run again", func(t *testing.T) { lifecycleBatchRunAgain(t, e, s) })

	t.Run("purge and run again", func(t *testing.T) { lifecyclePurgeAndRunAgain(t, e, s) })

	t.Run("lost node", func(t *testing.T) { lifecycleLostNode(t, e, s) })
	t.Logf("TestLifecycleOperations took %s", time.Since(start).Round(time.Second))
}

func ptrTo[T any](v T) *T { return &v }

// restartsOf reads gpushare_restarts_total of a replica's /metrics, by
// reason.
func restartsOf(t *testing.T, s *scheduler) map[string]int {
	t.Helper()
	resp, err := http.Get(s.http + "/metrics")
	must.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, `gpushare_restarts_total{reason="`)
		if !ok {
			continue
		}
		reason, v, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		must.NoError(t, err)
		out[reason] = int(n)
	}
	return out
}

// allocIDsOf lists the allocations' IDs.
func allocIDsOf(allocs []*api.Allocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, a.ID)
	}
	return out
}

// nodeNames lists the names of the allocations' nodes.
func nodeNames(allocs []*api.Allocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, a.NodeName)
	}
	return out
}

// settled waits until job id is pinned, no deployment of it runs and its
// current version's (if any) succeeded, and n allocations of that version
// run, and returns them.
func (e *env) settled(id string, n int) []*api.Allocation {
	e.t.Helper()
	var out []*api.Allocation
	e.eventually(liveness, fmt.Sprintf("%d allocation(s) of the current version of %s to run, its deployment done", n, id), func() bool {
		job, _, err := e.nomad.Jobs().Info(id, nil)
		if err != nil || len(pin.Gated(job)) > 0 {
			return false
		}
		d, _, err := e.nomad.Jobs().LatestDeployment(id, nil)
		if err != nil || (d != nil && (d.Status == api.DeploymentStatusRunning ||
			(d.JobVersion == *job.Version && d.Status != api.DeploymentStatusSuccessful))) {
			return false // a deployment under way, or this version's not successful
		}
		out = e.runningNow(id)
		for _, a := range out {
			if a.Job == nil || *a.Job.Version != *job.Version {
				return false
			}
		}
		return len(out) == n
	})
	return out
}

// promotedByScheduler waits until job id is pinned off node lost and the
// deployment of that version has succeeded, and returns it when it had
// canaries, promoted (the test promotes none: the scheduler did); nil
// when it succeeded without canaries (Nomad places none when no
// allocation of the older version runs).
func (e *env) promotedByScheduler(id, lost string) *api.Deployment {
	e.t.Helper()
	var d *api.Deployment
	e.eventually(liveness, "the deployment of "+id+"'s new pin to be promoted by the scheduler and succeed", func() bool {
		job, _, err := e.nomad.Jobs().Info(id, nil)
		if err != nil {
			return false
		}
		rec, ok := pin.ParseRecord(job, "g")
		if !ok || slices.Contains(rec.Nodes, lost) {
			return false
		}
		d, _, err = e.nomad.Jobs().LatestDeployment(id, nil)
		if err != nil || d == nil || d.JobVersion != *job.Version || d.Status != api.DeploymentStatusSuccessful {
			return false
		}
		if st := d.TaskGroups["g"]; st == nil || st.DesiredCanaries == 0 {
			d = nil
		} else {
			must.True(e.t, st.Promoted, must.Sprintf("deployment %s of %s succeeded unpromoted", d.ID, id))
		}
		return true
	})
	return d
}

// promotionsOf reads gpushare_promotions_total of a replica's /metrics.
func promotionsOf(t *testing.T, s *scheduler) int {
	t.Helper()
	resp, err := http.Get(s.http + "/metrics")
	must.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "gpushare_promotions_total "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			must.NoError(t, err)
			return int(n)
		}
	}
	t.Fatal("no gpushare_promotions_total in /metrics")
	return 0
}

// gpusOf lists the GPUs the allocations' shares are on.
func gpusOf(allocs []*api.Allocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, gpus(a)...)
	}
	return out
}

// newLifecycleEnv is a cluster of three 4-GPU PCIe clients whose GPU
// UUIDs differ: pcie-1 (the dev agent with the server) and pcie-2 in dc1,
// pcie-3 in dc2.
func newLifecycleEnv(t *testing.T) *env {
	t.Helper()
	return newPCIeEnv(t, "gpushare-lifecycle-", 30, "dc1", "dc1", "dc2")
}
