package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The later operations of TestLifecycleOperations, one function each.

// lifecycleCanaryPromotedByHand is TestLifecycleOperations/canary_promoted_by_hand.
func lifecycleCanaryPromotedByHand(t *testing.T, outer *env, s *scheduler) {
	// auto_promote = false: the canary runs beside the running
	// allocations until `nomad deployment promote`
	e := outer.in(t)
	spec := func(version string) *api.Job {
		j := e.parse("promoted", map[string]any{"shares": 25, "count": 2})
		u := j.TaskGroups[0].Update
		u.Canary, u.AutoPromote, u.MaxParallel = ptr(1), ptr(false), ptr(1)
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
		return j
	}
	_, _, err := e.nomad.Jobs().Register(spec("1"), nil)
	must.NoError(t, err)
	v1 := e.settled("promoted", 2)
	_, _, err = e.nomad.Jobs().Register(spec("2"), nil)
	must.NoError(t, err)
	var d *api.Deployment
	var canary string
	e.eventually(liveness, "the canary of version 2 to run healthy beside the 2 allocations of version 1", func() bool {
		job, _, err := e.nomad.Jobs().Info("promoted", nil)
		if err != nil || len(pin.Gated(job)) > 0 {
			return false
		}
		d, _, err = e.nomad.Jobs().LatestDeployment("promoted", nil)
		if err != nil || d == nil || d.JobVersion != *job.Version || d.Status != api.DeploymentStatusRunning {
			return false
		}
		st := d.TaskGroups["g"]
		if st == nil || len(st.PlacedCanaries) != 1 || st.HealthyAllocs < 1 {
			return false
		}
		canary = st.PlacedCanaries[0]
		old := 0
		for _, a := range e.runningNow("promoted") {
			if slices.ContainsFunc(v1, func(b *api.Allocation) bool { return b.ID == a.ID }) {
				old++
			}
		}
		return old == 2
	})
	// the user's change: the scheduler leaves its canary to the user —
	// decided on a fact, not a while: once a finished pass (which would
	// have promoted) has read the deployment with its canary healthy
	before := promotionsOf(t, s)
	_, meta, err := e.nomad.Deployments().Info(d.ID, nil)
	must.NoError(t, err)
	e.eventually(liveness, "a pass of the scheduler to decide on the healthy canary", func() bool {
		var h service.Health
		return getJSON(s.http+"/v1/health", &h) == nil && h.Decided >= meta.LastIndex
	})
	waiting, _, err := e.nomad.Deployments().Info(d.ID, nil)
	must.NoError(t, err)
	must.False(t, waiting.TaskGroups["g"].Promoted, must.Sprint("the scheduler promoted the user's canary"))
	must.Eq(t, before, promotionsOf(t, s))
	t.Logf("canary %s of version 2 runs beside the 2 allocations of version 1; promoting deployment %s", canary, d.ID)
	e.eventually(liveness, "nomad deployment promote to be accepted", func() bool {
		_, _, err := e.nomad.Deployments().PromoteAll(d.ID, nil)
		return err == nil
	})
	v2 := e.settled("promoted", 2)
	for _, a := range v2 {
		must.Eq(t, "2", a.Job.TaskGroups[0].Tasks[0].Env["APP_VERSION"])
		must.False(t, slices.ContainsFunc(v1, func(b *api.Allocation) bool { return b.ID == a.ID }))
	}
	must.True(t, slices.ContainsFunc(v2, func(a *api.Allocation) bool { return a.ID == canary }),
		must.Sprint("the promoted canary was replaced"))
	final, _, err := e.nomad.Deployments().Info(d.ID, nil)
	must.NoError(t, err)
	must.Eq(t, api.DeploymentStatusSuccessful, final.Status)
	t.Logf("promoted by hand: deployment %s successful, 2 allocations of version 2 run, the canary %s kept", d.ID, canary)
}

// lifecycleRollingUpdateWithMaxParallel is TestLifecycleOperations/rolling_update_with_max_parallel.
func lifecycleRollingUpdateWithMaxParallel(t *testing.T, outer *env, s *scheduler) {
	e := outer.in(t)
	spec := func(version string) *api.Job {
		j := e.parse("rolling", map[string]any{"shares": 25, "count": 3})
		j.TaskGroups[0].Update.MaxParallel = ptr(1)
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
		return j
	}
	_, _, err := e.nomad.Jobs().Register(spec("1"), nil)
	must.NoError(t, err)
	v1 := e.settled("rolling", 3)
	_, _, err = e.nomad.Jobs().Register(spec("2"), nil)
	must.NoError(t, err)
	v2 := e.settled("rolling", 3) // its deployment successful
	for _, a := range v2 {
		must.Eq(t, "2", a.Job.TaskGroups[0].Tasks[0].Env["APP_VERSION"])
		must.False(t, slices.ContainsFunc(v1, func(b *api.Allocation) bool { return b.ID == a.ID }))
	}
	t.Logf("rolling update, max_parallel 1: 3 allocations of version 2 run, on %v (version 1 ran on %v)", gpusOf(v2), gpusOf(v1))
}

// lifecycleCronLaunchedPeriodicChildren is TestLifecycleOperations/cron-launched_periodic_children.
func lifecycleCronLaunchedPeriodicChildren(t *testing.T, outer *env, s *scheduler) {
	// Nomad's cron (hashicorp/cronexpr) takes a seconds field when
	// given seven: a child every 10 seconds, launched by the
	// dispatcher, never forced
	e := outer.in(t)
	p := e.parse("cron", map[string]any{"shares": 25})
	p.Type = ptr("batch")
	p.Periodic = &api.PeriodicConfig{Enabled: ptr(true), SpecType: ptr("cron"), Spec: ptr("*/10 * * * * * *"), ProhibitOverlap: ptr(true)}
	p.Update, p.TaskGroups[0].Update, p.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
	p.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "env | grep -E '^(CUDA|NVIDIA|GPUSHARE)_' | sort"}
	_, _, err := e.nomad.Jobs().Register(p, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = e.nomad.Jobs().Deregister("cron", false, nil) })
	var child string
	e.eventually(liveness, "a child of cron launched by its cron to be pinned and complete", func() bool {
		jobs, _, err := e.nomad.Jobs().PrefixList("cron/periodic-")
		if err != nil {
			return false
		}
		for _, j := range jobs {
			job, _, err := e.nomad.Jobs().Info(j.ID, nil)
			if err != nil {
				continue
			}
			if _, pinned := pin.ParseRecord(job, "g"); !pinned {
				continue
			}
			allocs, _, err := e.nomad.Jobs().Allocations(j.ID, false, nil)
			if err != nil {
				continue
			}
			for _, a := range allocs {
				if a.ClientStatus == api.AllocClientStatusComplete {
					child = j.ID
					return true
				}
			}
		}
		return false
	})
	// stopped, the parent launches no more children
	_, _, err = e.nomad.Jobs().Deregister("cron", false, nil)
	must.NoError(t, err)
	parent, _, err := e.nomad.Jobs().Info("cron", nil)
	must.NoError(t, err)
	must.Eq(t, []string{"g"}, pin.Gated(parent), must.Sprint("the parent, a template, is never pinned"))
	t.Logf("cron: child %s, launched by the cron, pinned and complete; the parent stopped", child)
}

// lifecycleBatchRunAgain is TestLifecycleOperations/batch_run_again.
func lifecycleBatchRunAgain(t *testing.T, outer *env, s *scheduler) {
	// a batch job completes; the same file applied again (a
	// pipeline) does not run it again, as with Nomad alone; with a
	// new input it runs again
	e := outer.in(t)
	spec := func(input string) *api.Job {
		j := e.parse("etl", map[string]any{"shares": 25})
		j.Type = ptr("batch")
		j.Update, j.TaskGroups[0].Update, j.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		j.TaskGroups[0].Tasks[0].Config["args"] = []string{"-c", "true"}
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"INPUT": input}
		return j
	}
	completed := func(version uint64) []string {
		var done []string
		e.eventually(liveness, fmt.Sprintf("etl version %d to complete", version), func() bool {
			allocs, _, err := e.nomad.Jobs().Allocations("etl", true, nil)
			if err != nil {
				return false
			}
			done = nil
			ok := false
			for _, a := range allocs {
				if a.ClientStatus == api.AllocClientStatusComplete {
					done = append(done, fmt.Sprintf("%s@v%d", a.ID[:8], a.JobVersion))
					ok = ok || a.JobVersion >= version
				}
			}
			return ok
		})
		return done
	}
	_, _, err := e.nomad.Jobs().Register(spec("day-1"), nil)
	must.NoError(t, err)
	first := completed(0)
	_, _, err = e.nomad.Jobs().Register(spec("day-1"), nil) // the same file again
	must.NoError(t, err)
	v := e.version("etl")
	// the scheduler has seen the new version once it says what it
	// makes of it
	var status string
	e.eventually(liveness, "the scheduler to say the file registered again unchanged is done", func() bool {
		var js struct {
			Groups []struct {
				Lifecycle string `json:"lifecycle"`
				Why       string `json:"lifecycle_reason"`
			} `json:"groups"`
		}
		if err := getJSON(s.http+"/v1/jobs/etl", &js); err != nil || len(js.Groups) == 0 {
			return false
		}
		status = js.Groups[0].Lifecycle + ": " + js.Groups[0].Why
		return js.Groups[0].Lifecycle == "done" && strings.Contains(js.Groups[0].Why, "registered again unchanged")
	})
	must.Eq(t, v, e.version("etl"), must.Sprint("the scheduler registered a new version"))
	allocs, _, err := e.nomad.Jobs().Allocations("etl", true, nil)
	must.NoError(t, err)
	must.Eq(t, len(first), len(allocs), must.Sprint("the unchanged file ran again"))
	_, _, err = e.nomad.Jobs().Register(spec("day-2"), nil) // a new input
	must.NoError(t, err)
	again := completed(e.version("etl") + 1) // the version the scheduler pins
	must.Greater(t, len(first), len(again))
	t.Logf("etl: ran once (%v); the same file again ran nothing (%s); with a new input it ran again (%d runs)", first, status, len(again))
}

// lifecyclePurgeAndRunAgain is TestLifecycleOperations/purge_and_run_again.
func lifecyclePurgeAndRunAgain(t *testing.T, outer *env, s *scheduler) {
	e := outer.in(t)
	spec := e.parse("purged", map[string]any{"shares": 25})
	register := func() {
		b, err := json.Marshal(spec) // a copy: Register fills in the job
		must.NoError(t, err)
		var j api.Job
		must.NoError(t, json.Unmarshal(b, &j))
		_, _, err = e.nomad.Jobs().Register(&j, nil)
		must.NoError(t, err)
	}
	register()
	first := e.settled("purged", 1)[0]
	job, _, err := e.nomad.Jobs().Info("purged", nil)
	must.NoError(t, err)
	old, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	_, _, err = e.nomad.Jobs().Deregister("purged", true, nil)
	must.NoError(t, err)
	e.eventually(liveness, "purged to be gone", func() bool {
		_, _, err := e.nomad.Jobs().Info("purged", nil)
		return err != nil && strings.Contains(err.Error(), "404")
	})
	register()
	again := e.settled("purged", 1)[0]
	must.NotEq(t, first.ID, again.ID)
	job, _, err = e.nomad.Jobs().Info("purged", nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, *job.CreateIndex, rec.Incarnation, must.Sprint("pinned for another incarnation"))
	must.NotEq(t, old.Incarnation, rec.Incarnation)
	t.Logf("purged and run again: allocation %s replaced by %s, pinned for incarnation %d (was %d)", first.ID, again.ID, rec.Incarnation, old.Incarnation)
}

// lifecycleLostNode is TestLifecycleOperations/lost_node.
func lifecycleLostNode(t *testing.T, outer *env, s *scheduler) {
	// last: pcie-2's agent is killed, as a machine that dies (pcie-1
	// runs in the server's agent and cannot be lost alone)
	e := outer.in(t)
	nodes := map[string]string{} // name -> ID
	stubs, _, err := e.nomad.Nodes().List(nil)
	must.NoError(t, err)
	for _, n := range stubs {
		nodes[n.Name] = n.ID
	}
	// the jobs go to pcie-2 while pcie-1 takes no new work
	_, err = e.nomad.Nodes().ToggleEligibility(nodes["pcie-1"], false, nil)
	must.NoError(t, err)
	eligible := func() { _, _ = e.nomad.Nodes().ToggleEligibility(nodes["pcie-1"], true, nil) }
	t.Cleanup(eligible)
	// lost: one allocation in dc1; pair: two of 60 shares, which no
	// node holds both of, in dc1 and dc2
	j := e.parse("lost", map[string]any{"shares": 25})
	j.Datacenters = []string{"dc1"}
	_, _, err = e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	j = e.parse("pair", map[string]any{"shares": 60, "count": 2})
	j.Datacenters = []string{"dc1", "dc2"}
	_, _, err = e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	// manual: two allocations, spread over pcie-2 and pcie-3, whose new
	// versions are canaries that wait for a promote
	j = e.parse("manual", map[string]any{"shares": 25, "count": 2})
	j.Datacenters = []string{"dc1", "dc2"}
	u := j.TaskGroups[0].Update
	u.Canary, u.AutoPromote = ptr(1), ptr(false)
	_, _, err = e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	// bystander: two allocations in dc2 (pcie-3), which the lost node
	// must not touch
	j = e.parse("bystander", map[string]any{"shares": 25, "count": 2})
	j.Datacenters = []string{"dc2"}
	_, _, err = e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	bystander := e.settled("bystander", 2)
	lost := e.settled("lost", 1)[0]
	must.Eq(t, "pcie-2", lost.NodeName)
	manual := e.settled("manual", 2)
	must.SliceContainsAll(t, []string{"pcie-2", "pcie-3"}, nodeNames(manual))
	pair := e.settled("pair", 2)
	must.SliceContainsAll(t, []string{"pcie-2", "pcie-3"}, []string{pair[0].NodeName, pair[1].NodeName})
	eligible()

	// what runs before: the jobs with an allocation on pcie-2 lose it;
	// the others' allocations must not restart
	before := map[string][]string{} // job -> running allocation IDs
	hit := map[string]bool{}
	all, _, err := e.nomad.Allocations().List(nil)
	must.NoError(t, err)
	for _, a := range all {
		if a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun || strings.HasPrefix(a.JobID, "cron/") {
			continue
		}
		before[a.JobID] = append(before[a.JobID], a.ID)
		if a.NodeID == nodes["pcie-2"] {
			hit[a.JobID] = true
		}
	}
	restarts, promotions := restartsOf(t, s), promotionsOf(t, s)
	killed := time.Now()
	must.NoError(t, e.c.KillAgent("pcie-2"))
	t.Logf("killed the agent of pcie-2; jobs with an allocation there: %v", slices.Sorted(maps.Keys(hit)))
	e.eventually(liveness, "pcie-2 to be down", func() bool {
		n, _, err := e.nomad.Nodes().Info(nodes["pcie-2"], nil)
		return err == nil && n.Status == api.NodeStatusDown
	})
	e.eventually(liveness, "Nomad to mark pcie-2's allocations lost", func() bool {
		allocs, _, err := e.nomad.Nodes().Allocations(nodes["pcie-2"], nil)
		if err != nil {
			return false
		}
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
				return false
			}
		}
		return true
	})
	moved := e.settled("lost", 1)[0]
	must.NotEq(t, lost.ID, moved.ID)
	must.Eq(t, "pcie-1", moved.NodeName, must.Sprint("not pinned again on the surviving node of its datacenter"))
	pairAfter := e.settled("pair", 2)
	must.SliceContainsAll(t, []string{"pcie-1", "pcie-3"}, []string{pairAfter[0].NodeName, pairAfter[1].NodeName})
	var promoted []string
	for _, id := range slices.Sorted(maps.Keys(hit)) {
		job, _, err := e.nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		if u := job.TaskGroups[0].Update; u != nil && u.Canary != nil && *u.Canary > 0 && u.AutoPromote != nil && !*u.AutoPromote {
			// the new pin is a new version of the job, which Nomad
			// deploys with its canaries, and they wait for a promote
			// as any new version's would: the pin being the only
			// change, the scheduler promotes it; the test does not
			d := e.promotedByScheduler(id, nodes["pcie-2"])
			if d == nil {
				e.settled(id, len(before[id])) // no canary: none of its allocations ran
				continue
			}
			promoted = append(promoted, id)
			t.Logf("%s: deployment %s of version %d (the new pin) promoted by the scheduler, successful %s after the agent was killed",
				id, d.ID, d.JobVersion, time.Since(killed).Round(time.Second))
		}
		e.settled(id, len(before[id])) // runs again, pinned off pcie-2
	}
	for id, allocs := range before {
		if hit[id] {
			continue
		}
		now := e.runningNow(id)
		for _, a := range allocs {
			must.True(t, slices.ContainsFunc(now, func(b *api.Allocation) bool { return b.ID == a }),
				must.Sprintf("allocation %s of %s, on a surviving node, restarted", a, id))
		}
	}
	gained := map[string]int{}
	for reason, n := range restartsOf(t, s) {
		if n > restarts[reason] {
			gained[reason] = n - restarts[reason]
		}
	}
	must.SliceContains(t, promoted, "manual")
	must.GreaterEq(t, promotions+len(promoted), promotionsOf(t, s), must.Sprint("gpushare_promotions_total did not count the scheduler's promotes"))
	must.SliceContainsAll(t, allocIDsOf(bystander), allocIDsOf(e.runningNow("bystander")), must.Sprint("the bystander restarted"))
	manualAfter := e.settled("manual", 2)
	must.SliceContainsAll(t, []string{"pcie-1", "pcie-3"}, nodeNames(manualAfter))
	must.MapNotEmpty(t, gained, must.Sprint("gpushare_restarts_total counted nothing"))
	must.MapContainsKey(t, gained, "repin")
	kept := 0
	for id, allocs := range before {
		if !hit[id] {
			kept += len(allocs)
		}
	}
	t.Logf("pcie-2 lost: lost %s -> %s on %s; pair %s on %s -> %s on %s; %d allocation(s) of %d other jobs on pcie-1 and pcie-3 kept; promoted by the scheduler (canaries of the new pin): %v; restarts counted %v",
		lost.ID, moved.ID, moved.NodeName, allocIDs(pair), nodeNames(pair), allocIDs(pairAfter), nodeNames(pairAfter),
		kept, len(before)-len(hit), promoted, gained)
	t.Logf("manual %s on %v -> %s on %v: its new pin's canary promoted by the scheduler", allocIDs(manual), nodeNames(manual), allocIDs(manualAfter), nodeNames(manualAfter))
}

// lifecycleDispatch is TestLifecycleOperations/dispatch. Nomad 1.11
// refuses every registration of a dispatched job (its HTTP API drops the
// Dispatched flag, and its validation wants it unchanged), so gpushare
// pins the gated parameterized parent instead, to a pool: on each node
// its rules allow, all the shares of one GPU. Each child keeps its
// parent's constraints, and Nomad places it inside the pool on shares of
// one GPU, which Reserve accepts: five children of a quarter GPU run, two
// nodes' pools sharing them, and none is ever registered by gpushare.
func lifecycleDispatch(t *testing.T, e *env, s *scheduler) {
	e = e.in(t)
	p := e.parse("infer", map[string]any{"shares": 25})
	p.Type = ptr("batch")
	p.ParameterizedJob = &api.ParameterizedJobConfig{Payload: "optional"}
	p.Update, p.TaskGroups[0].Update, p.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
	_, _, err := e.nomad.Jobs().Register(p, nil)
	must.NoError(t, err)
	var rec *pin.Record
	e.eventually(liveness, "the parameterized parent to be pinned to a pool", func() bool {
		j, _, err := e.nomad.Jobs().Info("infer", nil)
		if err != nil || len(pin.Gated(j)) > 0 {
			return false
		}
		r, ok := pin.ParseRecord(j, "g")
		rec = r
		return ok
	})
	must.Eq(t, len(rec.Nodes), len(rec.GPUs), must.Sprint("one GPU per node"))
	var children []string
	for range 5 {
		resp, _, err := e.nomad.Jobs().Dispatch("infer", nil, nil, "", nil)
		must.NoError(t, err)
		children = append(children, resp.DispatchedJobID)
	}
	t.Cleanup(func() {
		for _, id := range append(children, "infer") {
			_, _, _ = e.nomad.Jobs().Deregister(id, false, nil)
		}
	})
	gpus := map[string]int{}
	for _, id := range children {
		a := e.running(id, 1, liveness)[0]
		var ids []string
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				ids = append(ids, d.DeviceIDs...)
			}
		}
		must.Len(t, 25, ids)
		on := map[string]bool{}
		for _, sh := range ids {
			must.SliceContains(t, rec.Shares, sh, must.Sprint("a child's shares are its parent's pool's"))
			on[strings.SplitN(sh, ":", 2)[0]] = true
		}
		must.MapLen(t, 1, on, must.Sprint("each child on one GPU"))
		for g := range on {
			gpus[g]++
		}
	}
	must.StrNotContains(t, string(readFile(t, filepath.Join(e.dir, "s1.log"))), "cannot update non-parameterized job", must.Sprint("a child's pin was attempted"))
	var st struct {
		Groups []struct{ State, Reason, Lifecycle string }
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/infer", &st))
	must.Eq(t, "template", st.Groups[0].State)
	t.Logf("parameterized parent pinned to a pool of %d GPU(s) on %v; 5 children dispatched run, per GPU %v", len(rec.GPUs), rec.Nodes, gpus)
}
