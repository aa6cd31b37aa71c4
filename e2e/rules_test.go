package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The rules cluster: four 4-GPU PCIe clients that differ in what Nomad
// checks before it places a group (issue 19, "never worse than Nomad
// alone"; docs/gate-and-pin.md, "The pin").
//
//	alpha  dc1  pool default  raw_exec  meta tier=gold  Tesla P100-PCIE-16GB
//	beta   dc2  pool default  raw_exec                  Tesla P100-PCIE-12GB
//	gamma  dc1  pool special  raw_exec                  Tesla P100-PCIE-12GB
//	delta  dc1  pool default  no raw_exec               Tesla P40
//
// The models differ so that a test can place a job by model, the one rule
// the scheduler honoured before it honoured Nomad's: the filler on delta
// and the jobs that need all of alpha.
const (
	rulesPool  = "special"
	modelAlpha = "Tesla P100-PCIE-16GB"
	modelBeta  = "Tesla P100-PCIE-12GB"
	modelDelta = "Tesla P40"
)

var rulesClients = []struct {
	name, dc, pool, model string
	deny                  []string
	meta                  map[string]string
}{
	{"alpha", "dc1", "", modelAlpha, nil, map[string]string{"tier": "gold"}},
	{"beta", "dc2", "", modelBeta, nil, nil},
	{"gamma", "dc1", rulesPool, modelBeta, nil, nil},
	{"delta", "dc1", "", modelDelta, []string{"raw_exec"}, nil},
}

// newRulesEnv starts the rules cluster (the first client is the dev agent
// with the server) with GPU UUIDs unique to each client, and a scheduler.
func newRulesEnv(t *testing.T) (*env, *scheduler) {
	t.Helper()
	fx := t.TempDir()
	src, err := fixtures.FS.ReadFile(fixtures.PCIe4GPU)
	must.NoError(t, err)
	must.StrContains(t, string(src), modelAlpha)
	var clients []devcluster.Client
	paths := map[string]string{}
	for i, c := range rulesClients {
		b := fixtureUUID.ReplaceAllString(string(src), fmt.Sprintf("GPU-${1}${2}0000%02d-", 10+i))
		b = strings.ReplaceAll(b, modelAlpha, c.model)
		p := filepath.Join(fx, c.name+".hcl")
		must.NoError(t, os.WriteFile(p, []byte(b), 0o644))
		paths[c.name] = p
		clients = append(clients, devcluster.Client{
			Name: c.name, Fixture: p, Datacenter: c.dc, NodePool: c.pool, DenyDrivers: c.deny, Meta: c.meta,
		})
	}
	e := envOn(t, startClusterWith(t, devcluster.Options{Clients: clients}), paths, "gpushare-rules-")
	// what the cluster is, as Nomad sees it (the pool was created by the
	// node's registration)
	nodes := e.nodes()
	must.MapLen(t, len(rulesClients), nodes)
	for _, c := range rulesClients {
		n := nodes[c.name]
		must.NotNil(t, n, must.Sprintf("no node %s", c.name))
		must.Eq(t, c.dc, n.Datacenter)
		must.Eq(t, orDefault(c.pool, "default"), n.NodePool)
		raw := n.Drivers["raw_exec"]
		must.Eq(t, c.deny == nil, raw != nil && raw.Detected && raw.Healthy, must.Sprintf("raw_exec on %s", c.name))
	}
	pools, _, err := e.nomad.NodePools().List(nil)
	must.NoError(t, err)
	must.True(t, slices.ContainsFunc(pools, func(p *api.NodePool) bool { return p.Name == rulesPool }))
	return e, e.startScheduler("s1", "")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// nodes returns the cluster's nodes by name.
func (e *env) nodes() map[string]*api.Node {
	e.t.Helper()
	stubs, _, err := e.nomad.Nodes().List(nil)
	must.NoError(e.t, err)
	out := map[string]*api.Node{}
	for _, s := range stubs {
		n, _, err := e.nomad.Nodes().Info(s.ID, nil)
		must.NoError(e.t, err)
		out[n.Name] = n
	}
	return out
}

// nodeName maps node IDs to names.
func (e *env) nodeName() map[string]string {
	e.t.Helper()
	stubs, _, err := e.nomad.Nodes().List(nil)
	must.NoError(e.t, err)
	out := map[string]string{}
	for _, n := range stubs {
		out[n.ID] = n.Name
	}
	return out
}

// in returns a copy of e whose waits fail t (a subtest) instead of e's test.
func (e *env) in(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// ruleCase is a gated 25-share job shaped by edit that Nomad allows only
// on the nodes in allowed.
type ruleCase struct {
	name    string
	edit    func(job *api.Job)
	allowed []string
}

// TestSchedulerHonoursNomadRules: a gated group runs where Nomad allows it
// and nowhere else, for each rule Nomad checks (datacenters, node pool,
// driver, constraints at job, group and task level); a group no node may
// run waits, says why, and holds no shares: a later job that needs those
// shares runs.
//
// A filler job on delta (the only node of its model) makes delta's GPU the
// one a fraction packs onto, so a scheduler that did not check Nomad's
// rules would pin every case there.
func TestSchedulerHonoursNomadRules(t *testing.T) {
	start := time.Now()
	e, s := newRulesEnv(t)
	t.Logf("cluster and scheduler ready in %s", time.Since(start).Round(time.Second))

	filler := e.parse("filler", map[string]any{"shares": 50, "model": modelDelta})
	filler.TaskGroups[0].Tasks[0].Driver = "mock_driver" // delta has no raw_exec
	filler.TaskGroups[0].Tasks[0].Config = map[string]any{"run_for": "1h"}
	_, _, err := e.nomad.Jobs().Register(filler, nil)
	must.NoError(t, err)
	fa := e.running("filler", 1, 60*time.Second)[0]
	must.Eq(t, "delta", fa.NodeName, must.Sprint("the filler (the only job of delta's model) runs elsewhere"))

	cases := []ruleCase{
		{"datacenters dc2", func(j *api.Job) { j.Datacenters = []string{"dc2"} }, []string{"beta"}},
		{"node pool", func(j *api.Job) { j.NodePool = ptr(rulesPool) }, []string{"gamma"}},
		// delta lacks raw_exec; gamma is in another pool
		{"raw_exec driver", func(*api.Job) {}, []string{"alpha", "beta"}},
		{"group constraint on meta", func(j *api.Job) {
			tg := j.TaskGroups[0]
			tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: "${meta.tier}", RTarget: "gold", Operand: "="})
		}, []string{"alpha"}},
		{"job constraint on node name", func(j *api.Job) {
			j.Constraints = append(j.Constraints, &api.Constraint{LTarget: "${node.unique.name}", RTarget: "beta", Operand: "="})
		}, []string{"beta"}},
		{"task constraint on node name", func(j *api.Job) {
			task := j.TaskGroups[0].Tasks[0]
			task.Constraints = append(task.Constraints, &api.Constraint{LTarget: "${node.unique.name}", RTarget: "^(alpha|gamma)$", Operand: "regexp"})
		}, []string{"alpha"}}, // gamma: other pool
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.in(t).runsOnlyOn(fmt.Sprintf("rule-%d", i), c)
		})
	}

	t.Run("a group no node may run waits and holds nothing", func(t *testing.T) {
		e := e.in(t)
		// all the shares of alpha, the only node of that model, on a kernel
		// no node runs
		nowhere := e.parse("nowhere", map[string]any{"shares": 400, "model": modelAlpha})
		nowhere.TaskGroups[0].Constraints = append(nowhere.TaskGroups[0].Constraints,
			&api.Constraint{LTarget: "${attr.kernel.name}", RTarget: "plan9", Operand: "="})
		_, _, err := e.nomad.Jobs().Register(nowhere, nil)
		must.NoError(t, err)
		const why = "no node passes its constraint ${attr.kernel.name} = plan9"
		var state, reason string
		// "refused" (for good, until the job or the nodes change) waits too
		waits := func() bool { return (state == "pending" || state == "refused") && reason != "" }
		e.until(30*time.Second, "nowhere/g to be reported waiting in /v1/groups", func() bool {
			e.notPinned("nowhere", why)
			state, reason = listedIn(s, "nowhere", "g")
			return waits()
		}, func() string { return fmt.Sprintf("/v1/groups: %q %q; %s", state, reason, e.schedulerView("nowhere")) })
		t.Logf("/v1/groups says nowhere/g waits (%s): %s", state, reason)
		must.StrContains(t, reason, "attr.kernel.name", must.Sprint("the reason does not name the constraint no node passes"))

		// the shares it asked for are free: a job that needs all of alpha runs
		e.register("after", map[string]any{"shares": 400, "model": modelAlpha})
		var a *api.Allocation
		e.until(60*time.Second, "after (all of alpha) to run", func() bool {
			e.notPinned("nowhere", why)
			if r := e.runningNow("after"); len(r) == 1 {
				a = r[0]
				return true
			}
			return false
		}, func() string {
			return fmt.Sprintf("after: %s; nowhere: %s; Nomad says of after: %s", e.schedulerView("after"), e.schedulerView("nowhere"), e.placementFailure("after"))
		})
		must.Eq(t, "alpha", a.NodeName)
		must.SliceLen(t, 4, gpus(a))
		e.notPinned("nowhere", why)
		stubs, _, err := e.nomad.Jobs().Allocations("nowhere", true, nil)
		must.NoError(t, err)
		must.SliceEmpty(t, stubs, must.Sprint("Nomad placed a job no node may run"))
		state, reason = listedIn(s, "nowhere", "g")
		must.True(t, waits(), must.Sprintf("nowhere/g is no longer reported waiting (%q %q)", state, reason))
		// and `gpushare status` says so to the user
		out, err := exec.Command(cliBin, "status", "-address", e.c.Address(), "-scheduler", s.http).CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		must.StrContains(t, string(out), "default/nowhere/g  "+state+": ", must.Sprint(string(out)))
		must.StrContains(t, string(out), "attr.kernel.name", must.Sprint(string(out)))
	})
	t.Logf("TestSchedulerHonoursNomadRules took %s", time.Since(start).Round(time.Second))
}

// runsOnlyOn registers the case's job as id and checks that it runs on one
// of the allowed nodes and that no version of it was ever pinned
// elsewhere; it fails as soon as it sees such a pin. The job is stopped
// afterwards (not purged: a purge while a plan is in flight crashes Nomad
// 1.11.3), so every case starts from the filler alone.
func (e *env) runsOnlyOn(id string, c ruleCase) {
	t := e.t
	job := e.parse(id, map[string]any{"shares": 25})
	c.edit(job)
	_, _, err := e.nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() { e.stop(id) })
	rule := fmt.Sprintf("%s (Nomad allows only %s)", c.name, strings.Join(c.allowed, ", "))
	var a *api.Allocation
	e.until(60*time.Second, id+" to run", func() bool {
		e.pinnedOnlyTo(id, c.allowed, rule)
		if r := e.runningNow(id); len(r) > 0 {
			a = r[0]
			return true
		}
		return false
	}, func() string {
		return fmt.Sprintf("%s\n  scheduler says: %s\n  Nomad says: %s", rule, e.schedulerView(id), e.placementFailure(id))
	})
	// a pin elsewhere that was undone between two looks
	e.pinnedOnlyTo(id, c.allowed, rule)
	if !slices.Contains(c.allowed, a.NodeName) {
		t.Fatalf("%s: allocation %s runs on %s", rule, a.ID, a.NodeName)
	}
	t.Logf("%s runs on %s (%s)", id, a.NodeName, rule)
}

// pinnedOnlyTo fails the test when a version of job id was pinned to a
// node outside allowed: Nomad never places it there, and until the
// scheduler notices, the group waits and holds those shares.
func (e *env) pinnedOnlyTo(id string, allowed []string, rule string) {
	e.t.Helper()
	var bad []string
	for _, p := range e.pins(id) {
		for _, n := range p.nodes {
			if !slices.Contains(allowed, n) {
				bad = append(bad, fmt.Sprintf("version %d pinned it to %s (shares %s)", p.version, n, abbrev(p.rec.Shares)))
			}
		}
	}
	if len(bad) > 0 {
		e.t.Fatalf("%s: the scheduler pinned %s where Nomad never places it: %s\n  scheduler says: %s\n  Nomad says: %s",
			rule, id, firstOf(bad, 4), e.schedulerView(id), e.placementFailure(id))
	}
}

// notPinned fails the test when a version of job id was pinned: no node
// may run it, and a pin holds the shares.
func (e *env) notPinned(id, why string) {
	e.t.Helper()
	var bad []string
	for _, p := range e.pins(id) {
		bad = append(bad, fmt.Sprintf("version %d pinned it to %v (%d shares)", p.version, p.nodes, len(p.rec.Shares)))
	}
	if len(bad) > 0 {
		e.t.Fatalf("the scheduler pinned %s, though %s: %s\n  scheduler says: %s\n  Nomad says: %s",
			id, why, firstOf(bad, 4), e.schedulerView(id), e.placementFailure(id))
	}
}

// versionPin is one pinned version of a job.
type versionPin struct {
	version uint64
	nodes   []string // names
	rec     *pin.Record
}

// pins lists the versions of job id (Nomad keeps them all here) that
// carry a pin: no gate, a placement record.
func (e *env) pins(id string) []versionPin {
	e.t.Helper()
	versions, _, _, err := e.nomad.Jobs().Versions(id, false, nil)
	must.NoError(e.t, err)
	names := e.nodeName()
	var out []versionPin
	for _, v := range versions {
		if len(pin.Gated(v)) > 0 {
			continue
		}
		rec, ok := pin.ParseRecord(v, "g")
		if !ok {
			continue
		}
		p := versionPin{version: *v.Version, rec: rec}
		for _, n := range rec.Nodes {
			p.nodes = append(p.nodes, orDefault(names[n], n))
		}
		out = append(out, p)
	}
	return out
}

// schedulerView is what the first scheduler says of job id's groups.
func (e *env) schedulerView(id string) string {
	if len(e.scheds) == 0 {
		return "no scheduler"
	}
	var st jobStatusView
	if err := getJSON(e.scheds[0].http+"/v1/jobs/"+id, &st); err != nil {
		return err.Error()
	}
	var parts []string
	for _, g := range st.Groups {
		parts = append(parts, fmt.Sprintf("group %s %s: %s", g.Name, g.State, g.Reason))
	}
	return strings.Join(parts, "; ")
}

// placementFailure is why Nomad's latest evaluation of job id that failed
// to place could not place it.
func (e *env) placementFailure(id string) string {
	evals, _, err := e.nomad.Jobs().Evaluations(id, nil)
	if err != nil || len(evals) == 0 {
		return "no evaluation yet"
	}
	var latest *api.Evaluation
	for _, ev := range evals {
		if len(ev.FailedTGAllocs) > 0 && (latest == nil || ev.CreateIndex > latest.CreateIndex) {
			latest = ev
		}
	}
	if latest == nil {
		return fmt.Sprintf("%d evaluation(s), none failed to place", len(evals))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "evaluation %s (%s)", latest.ID[:8], latest.Status)
	for tg, m := range latest.FailedTGAllocs {
		fmt.Fprintf(&b, "; group %s: %d node(s) evaluated, %d filtered, by constraint %v, by class %v, exhausted %v",
			tg, m.NodesEvaluated, m.NodesFiltered, m.ConstraintFiltered, m.ClassFiltered, m.DimensionExhausted)
	}
	return b.String()
}

// listedIn is the state ("pending" or "refused") and reason of job/group
// in the scheduler's /v1/groups, or "" when it is not listed.
func listedIn(s *scheduler, job, group string) (state, reason string) {
	var ws []struct{ Job, Group, State, Reason string }
	if getJSON(s.http+"/v1/groups", &ws) != nil {
		return "", ""
	}
	for _, w := range ws {
		if w.Job == job && w.Group == group {
			return w.State, w.Reason
		}
	}
	return "", ""
}

// until polls cond until it holds; past the timeout (at least liveness)
// it fails the test with what explain says.
func (e *env) until(timeout time.Duration, what string, cond func() bool, explain func() string) {
	e.t.Helper()
	timeout = max(timeout, liveness)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, explain())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop stops job id and waits until its allocations have stopped.
func (e *env) stop(id string) {
	_, _, _ = e.nomad.Jobs().Deregister(id, false, nil)
	deadline := time.Now().Add(liveness)
	for time.Now().Before(deadline) {
		stubs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
		if err == nil && !slices.ContainsFunc(stubs, func(a *api.AllocationListStub) bool {
			return a.ClientStatus == "running" || a.ClientStatus == "pending"
		}) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Logf("allocations of %s still running %s after it was stopped", id, liveness)
}

// firstOf joins the first n of list (newest versions first) and says how
// many more there are: a scheduler that pins again and again makes dozens.
func firstOf(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, "; ")
	}
	return fmt.Sprintf("%s; and %d more pinned versions", strings.Join(list[:n], "; "), len(list)-n)
}

func abbrev(ids []string) string {
	if len(ids) <= 3 {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s,...(%d)", strings.Join(ids[:2], ","), len(ids))
}
