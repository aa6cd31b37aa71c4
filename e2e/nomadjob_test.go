package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// schedulerJobFile is the jobspec the repository ships to run the
// scheduler on Nomad.
var schedulerJobFile = filepath.Join("..", "deploy", "nomad", "gpushare-scheduler.nomad.hcl")

// The shipped jobspec runs the scheduler on an ACL cluster: its token, made
// with the shipped policy, is in the variable nomad/jobs/gpushare-scheduler,
// which the job's template reads through its workload identity. Its two
// replicas run (Nomad places them: the job is neither gated nor asks for
// shares), one leads, and it pins a gated job, which runs. When the
// leader's allocation stops, another replica leads and places the next.
func TestSchedulerAsNomadJob(t *testing.T) {
	testSchedulerAsNomadJob(t, true)
}

// Without ACLs the token variable need not exist: the template renders an
// empty token file and the scheduler sends no token.
func TestSchedulerAsNomadJobNoACL(t *testing.T) {
	testSchedulerAsNomadJob(t, false)
}

func testSchedulerAsNomadJob(t *testing.T, acl bool) {
	start := time.Now()
	e := newEnvWith(t, devcluster.Options{ACL: acl})
	// the scheduler runs in a namespace of its own (README: submitters of
	// other namespaces cannot read its token or signing key)
	const ns = "gpushare"
	_, err := e.nomad.Namespaces().Register(&api.Namespace{Name: ns, Description: "the gpushare scheduler"}, nil)
	must.NoError(t, err)
	if acl {
		must.NoError(t, e.c.ApplyPolicyFile("gpushare-scheduler", policyFile))
		token, err := e.c.CreateToken("gpushare", "gpushare-scheduler")
		must.NoError(t, err)
		_, _, err = e.nomad.Variables().Create(&api.Variable{
			Namespace: ns,
			Path:      "nomad/jobs/gpushare-scheduler",
			Items:     api.VariableItems{"token": token},
		}, nil)
		must.NoError(t, err)
	}

	src, err := os.ReadFile(schedulerJobFile)
	must.NoError(t, err)
	vars := fmt.Sprintf("gpushare_bin = %q\nnomad_addr = %q\nlog_level = \"debug\"\nleader_ttl = \"10s\"\nleader_lock_delay = \"1s\"\n", cliBin, e.c.Address())
	job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: vars, Canonicalize: true})
	must.NoError(t, err)
	must.Eq(t, "gpushare-scheduler", *job.ID)
	must.Eq(t, ns, *job.Namespace)
	must.Eq(t, 2, *job.TaskGroups[0].Count)
	must.SliceEmpty(t, pin.Gated(job), must.Sprint("the scheduler's own job is gated"))
	for _, task := range job.TaskGroups[0].Tasks {
		must.Eq(t, "raw_exec", task.Driver)
		must.SliceEmpty(t, task.Resources.Devices, must.Sprint("the scheduler's own job asks for devices"))
	}
	_, _, err = e.nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			dumpAllocLogs(t, e, ns, "gpushare-scheduler", "scheduler")
		}
	})

	allocs := e.runningIn(ns, "gpushare-scheduler", 2, 60*time.Second)
	must.NotEq(t, allocs[0].NodeID, allocs[1].NodeID, must.Sprint("replicas on the same client"))
	var replicas []string
	for _, a := range allocs {
		replicas = append(replicas, httpOf(t, a))
	}
	t.Logf("replicas at %v (%s after start)", replicas, time.Since(start).Round(time.Millisecond))

	var leader string
	e.eventually(30*time.Second, "one replica to lead", func() bool {
		n := 0
		for _, r := range replicas {
			var h struct{ Leader, Synced bool }
			if getJSON(r+"/v1/health", &h) == nil && h.Leader && h.Synced {
				leader, n = r, n+1
			}
		}
		return n == 1
	})
	t.Logf("leader at %s", leader)

	e.register("by-nomad-job", map[string]any{"shares": 25})
	a := e.running("by-nomad-job", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	pinned, _, err := e.nomad.Jobs().Info("by-nomad-job", nil)
	must.NoError(t, err)
	_, ok := pin.ParseRecord(pinned, "g")
	must.True(t, ok, must.Sprint("the job carries no placement record"))
	var st struct {
		Groups []struct{ State string }
	}
	// the API listens beyond loopback: it asks for a token (where Nomad has ACLs)
	must.NoError(t, getJSONWith(leader+"/v1/jobs/by-nomad-job", e.c.ManagementToken(), &st))
	t.Logf("leader's view of by-nomad-job: %+v", st)

	// the CLI finds the scheduler through the job's Nomad service, with no
	// -scheduler flag and no GPUSHARE_ADDR
	var out []byte
	e.eventually(15*time.Second, "gpushare job status to find the scheduler's service", func() bool {
		cmd := exec.Command(cliBin, "job", "status", "by-nomad-job")
		cmd.Env = append(os.Environ(), "GPUSHARE_ADDR=", "NOMAD_ADDR="+e.c.Address(), "NOMAD_TOKEN="+e.c.ManagementToken())
		out, err = cmd.CombinedOutput()
		return err == nil
	})
	must.StrContains(t, string(out), "group g: pinned", must.Sprint(string(out)))

	// the leader's allocation stops: another replica takes the lock (the
	// follower, or the allocation Nomad starts in its place, whichever
	// asks first) and places the next gated job
	for i, r := range replicas {
		if r == leader {
			_, err = e.nomad.Allocations().Stop(allocs[i], nil)
			must.NoError(t, err)
		}
	}
	stopped := time.Now()
	e.eventually(30*time.Second, "another replica to lead", func() bool {
		for _, a := range e.runningNowIn(ns, "gpushare-scheduler") {
			var h struct{ Leader bool }
			if r := httpOf(t, a); r != leader && getJSON(r+"/v1/health", &h) == nil && h.Leader {
				leader = r
				return true
			}
		}
		return false
	})
	t.Logf("%s leads %s after the leader's allocation was stopped", leader, time.Since(stopped).Round(time.Millisecond))
	e.register("after-failover", map[string]any{"shares": 50})
	must.SliceLen(t, 1, gpus(e.running("after-failover", 1, 60*time.Second)[0]))

	// the scheduler's own allocations hold no shares
	for _, a := range e.runningNowIn(ns, "gpushare-scheduler") {
		must.SliceEmpty(t, allocatedIDs(a))
	}
	_, _, err = e.nomad.Jobs().Deregister("gpushare-scheduler", true, &api.WriteOptions{Namespace: ns})
	must.NoError(t, err)
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// httpOf returns the http:// address of an allocation's "http" port.
func httpOf(t *testing.T, a *api.Allocation) string {
	t.Helper()
	must.NotNil(t, a.AllocatedResources)
	for _, p := range a.AllocatedResources.Shared.Ports {
		if p.Label == "http" {
			ip := p.HostIP
			if ip == "" {
				ip = "127.0.0.1"
			}
			return fmt.Sprintf("http://%s:%d", ip, p.Value)
		}
	}
	t.Fatalf("allocation %s has no http port", a.ID)
	return ""
}

// dumpAllocLogs logs the stderr of a task of each allocation of a job.
func dumpAllocLogs(t *testing.T, e *env, ns, job, task string) {
	stubs, _, err := e.nomad.Jobs().Allocations(job, true, &api.QueryOptions{Namespace: ns})
	if err != nil {
		t.Logf("allocations of %s: %v", job, err)
		return
	}
	for _, s := range stubs {
		t.Logf("allocation %s of %s: %s/%s %v", s.ID, job, s.ClientStatus, s.DesiredStatus, s.TaskStates)
		a, _, err := e.nomad.Allocations().Info(s.ID, nil)
		if err != nil {
			continue
		}
		for _, f := range []string{"stderr", "stdout"} {
			r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/"+task+"."+f+".0", nil)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if len(b) > 10000 {
				b = b[len(b)-10000:]
			}
			t.Logf("==== %s %s ====\n%s", s.ID, f, strings.TrimSpace(string(b)))
		}
	}
}

// While no scheduler runs, nothing is lost: a running pinned job keeps its
// allocation, a gated job registered meanwhile waits at the gate (no
// allocation, status pending), and a scheduler started again places it
// without touching the first job (same allocation, same version).
func TestNoSchedulerNothingLost(t *testing.T) {
	start := time.Now()
	e := newEnv(t)
	s1 := e.startScheduler("s1", "")
	e.eventually(30*time.Second, "s1 to lead", s1.leader)
	e.register("before", map[string]any{"shares": 50})
	first := e.running("before", 1, 60*time.Second)[0]
	version := e.version("before")

	s1.proc.Stop()
	e.register("meanwhile", map[string]any{"shares": 25})
	// it waits at the gate for as long as no scheduler runs: once Nomad
	// has evaluated it (not after a while), it has no allocation
	e.eventually(liveness, "Nomad to evaluate the gated job", func() bool {
		evals, _, err := e.nomad.Jobs().Evaluations("meanwhile", nil)
		must.NoError(t, err)
		for _, ev := range evals {
			if ev.Status == api.EvalStatusComplete {
				return true
			}
		}
		return false
	})
	allocs, _, err := e.nomad.Jobs().Allocations("meanwhile", true, nil)
	must.NoError(t, err)
	must.SliceEmpty(t, allocs, must.Sprint("a gated job got an allocation with no scheduler"))
	job, _, err := e.nomad.Jobs().Info("meanwhile", nil)
	must.NoError(t, err)
	must.SliceLen(t, 1, pin.Gated(job))
	// Nomad 1.11 says pending; 2.0 says running while the job has a
	// deployment that is not over (its getJobStatus), as this service job
	// has from its first evaluation, with no allocation either way
	if *job.Status != "pending" {
		d, _, err := e.nomad.Jobs().LatestDeployment("meanwhile", nil)
		must.NoError(t, err)
		must.NotNil(t, d, must.Sprintf("status %s with no allocation and no deployment", *job.Status))
		must.Eq(t, "running", *job.Status)
		must.Eq(t, api.DeploymentStatusRunning, d.Status)
	}
	still := e.runningNow("before")
	must.SliceLen(t, 1, still)
	must.Eq(t, first.ID, still[0].ID)
	t.Logf("no scheduler for 5s: meanwhile %s, before still on %s", *job.Status, first.ID)

	s2 := e.startScheduler("s2", "")
	e.eventually(30*time.Second, "s2 to lead", s2.leader)
	a := e.running("meanwhile", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	still = e.runningNow("before")
	must.SliceLen(t, 1, still)
	must.Eq(t, first.ID, still[0].ID, must.Sprint("the running job was replaced"))
	must.Eq(t, version, e.version("before"), must.Sprint("the running job was pinned again"))
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}

// getJSONWith is getJSON with a Nomad ACL token ("" sends none).
func getJSONWith(url, token string, out any) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}
