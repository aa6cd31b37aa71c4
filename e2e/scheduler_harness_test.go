package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Fixture GPU models of the three clients.
const (
	modelH100 = "NVIDIA H100 80GB HBM3"
	modelV100 = "Tesla V100-SXM2-16GB"
	modelP100 = "Tesla P100-PCIE-16GB"
)

// env is a cluster of three clients (HGX H100, DGX-1 V100, 4 PCIe GPUs on
// two sockets) with gpushare schedulers.
type env struct {
	t      testing.TB
	c      *devcluster.Cluster
	nomad  *api.Client
	dir    string
	scheds []*scheduler
	// fixtures are the clients' fixture files, by client name.
	fixtures map[string]string
	// nomadHCL is more of the schedulers' nomad block (token, TLS files).
	nomadHCL string
	// nomadAddr, when set, is the address the schedulers reach Nomad at
	// (a fault proxy).
	nomadAddr string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, devcluster.Options{})
}

// newEnvWith is newEnv on a cluster with more options (ACL, TLS).
func newEnvWith(t testing.TB, opts devcluster.Options) *env {
	t.Helper()
	fx := t.TempDir()
	var clients []devcluster.Client
	paths := map[string]string{}
	for _, c := range []struct{ name, fixture, rack string }{
		{"h100", fixtures.HGXH100, "r1"}, {"dgx1", fixtures.DGX1V100, "r1"}, {"pcie", fixtures.PCIe4GPU, "r2"},
	} {
		p, err := fixtures.WriteTo(c.fixture, fx)
		must.NoError(t, err)
		paths[c.name] = p
		clients = append(clients, devcluster.Client{Name: c.name, Fixture: p, Meta: map[string]string{"rack": c.rack}})
	}
	opts.Clients, opts.Persistent = clients, true
	return envOn(t, startClusterWith(t, opts), paths, "gpushare-sched-")
}

// envOn is the env of a started cluster, with a directory for the
// schedulers' configs and logs (dumped when the test fails).
func envOn(t testing.TB, c *devcluster.Cluster, fixtures map[string]string, prefix string) *env {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	must.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		if os.Getenv("GPUSHARE_E2E_KEEP") != "" {
			t.Logf("kept scheduler logs in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return &env{t: t, c: c, nomad: c.API(), dir: dir, fixtures: fixtures}
}

// scheduler is one running `gpushare scheduler` replica.
type scheduler struct {
	proc *devcluster.Process
	http string
}

// startScheduler starts a replica with the given extra HCL configuration
// and waits until it has listed the cluster.
func (e *env) startScheduler(name, extra string) *scheduler {
	e.t.Helper()
	return e.startSchedulerLevel(name, "trace", extra)
}

// startSchedulerLevel is startScheduler with another log level (the load
// test logs less, so that its CPU figure is the scheduler's work).
func (e *env) startSchedulerLevel(name, level, extra string) *scheduler {
	e.t.Helper()
	return e.startSchedulerBin(name, cliBin, level, extra)
}

// startSchedulerBin is startSchedulerLevel with another gpushare binary
// (an earlier release, to upgrade from).
func (e *env) startSchedulerBin(name, bin, level, extra string) *scheduler {
	e.t.Helper()
	port := freePort(e.t)
	addr := e.c.Address()
	if e.nomadAddr != "" {
		addr = e.nomadAddr
	}
	cfg := fmt.Sprintf("nomad {\n  address = %q\n%s}\nhttp_address = \"127.0.0.1:%d\"\nlog_level = %q\nleader {\n  ttl = \"10s\"\n  lock_delay = \"1s\"\n}\n%s\n",
		addr, e.nomadHCL, port, level, extra)
	path := filepath.Join(e.dir, name+".hcl")
	must.NoError(e.t, os.WriteFile(path, []byte(cfg), 0o644))
	p, err := devcluster.StartProcess(filepath.Join(e.dir, name+".log"), bin, "scheduler", "-config", path)
	must.NoError(e.t, err)
	s := &scheduler{proc: p, http: fmt.Sprintf("http://127.0.0.1:%d", port)}
	e.scheds = append(e.scheds, s)
	e.t.Cleanup(p.Stop)
	e.eventually(30*time.Second, "scheduler "+name+" healthy", func() bool {
		var h struct{ Synced bool }
		return getJSON(s.http+"/v1/health", &h) == nil && h.Synced
	})
	return s
}

func (s *scheduler) leader() bool {
	var h struct{ Leader bool }
	return getJSON(s.http+"/v1/health", &h) == nil && h.Leader
}

func getJSON(url string, out any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// liveness is the least time a wait gives a step: every wait bounds
// liveness only (a step that never happens fails the test), so a loaded
// machine that takes a minute for a step of seconds does not fail it.
const liveness = 10 * time.Minute

// eventually polls cond until it holds or the timeout (at least liveness)
// passes.
func (e *env) eventually(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	timeout = max(timeout, liveness)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range e.scheds {
				if s.proc.Exited() {
					continue
				}
				var m gpumap.Map
				if getJSON(s.http+"/v1/gpus", &m) == nil {
					var b strings.Builder
					_ = gpumap.Render(&b, &m)
					e.t.Logf("GPU map of scheduler %s:\n%s", s.http, b.String())
				}
			}
			e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// register submits testdata/shares.nomad.hcl (gated) as job id.
func (e *env) register(id string, vars map[string]any) *api.Job {
	e.t.Helper()
	job := e.parse(id, vars)
	_, _, err := e.nomad.Jobs().Register(job, nil)
	must.NoError(e.t, err)
	return job
}

// parse reads testdata/shares.nomad.hcl with the given variables as job id.
func (e *env) parse(id string, vars map[string]any) *api.Job {
	e.t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "shares.nomad.hcl"))
	must.NoError(e.t, err)
	var b strings.Builder
	for k, v := range vars {
		switch v := v.(type) {
		case string:
			fmt.Fprintf(&b, "%s = %q\n", k, v)
		default:
			fmt.Fprintf(&b, "%s = %v\n", k, v)
		}
	}
	job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(src), Variables: b.String(), Canonicalize: true})
	must.NoError(e.t, err)
	job.ID, job.Name = &id, &id
	return job
}

func (e *env) purge(ids ...string) {
	for _, id := range ids {
		_, _, _ = e.nomad.Jobs().Deregister(id, true, nil)
	}
	e.eventually(60*time.Second, "purged jobs' allocations to stop", func() bool {
		for _, id := range ids {
			allocs, _, _ := e.nomad.Jobs().Allocations(id, false, nil)
			for _, a := range allocs {
				if a.ClientStatus == "running" || a.ClientStatus == "pending" {
					return false
				}
			}
		}
		return true
	})
}

// running waits until job id has n running allocations and returns them.
func (e *env) running(id string, n int, timeout time.Duration) []*api.Allocation {
	e.t.Helper()
	return e.runningIn("", id, n, timeout)
}

// runningIn is running for a job of namespace ns ("": the client's).
func (e *env) runningIn(ns, id string, n int, timeout time.Duration) []*api.Allocation {
	e.t.Helper()
	var out []*api.Allocation
	e.eventually(timeout, fmt.Sprintf("%d running allocation(s) of %s", n, id), func() bool {
		out = e.runningNowIn(ns, id)
		return len(out) == n
	})
	return out
}

// gpus returns the GPU UUIDs an allocation's shares are on.
func gpus(a *api.Allocation) []string {
	set := map[string]bool{}
	for _, id := range allocatedIDs(a) {
		sid, err := devicefn.ParseShareID(id)
		if err == nil {
			set[sid.UUID] = true
		}
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// group returns the decoded gpushare group of a node.
func (e *env) group(nodeID string) *devicefn.Group {
	e.t.Helper()
	node, _, err := e.nomad.Nodes().Info(nodeID, nil)
	must.NoError(e.t, err)
	d := gpushareGroup(e.t, node)
	g, err := nomadattr.DecodeGroup(d)
	must.NoError(e.t, err)
	return g
}

// link returns the link between two GPUs of a node and their NUMA nodes.
func link(g *devicefn.Group, a, b string) (devicefn.Link, int, int) {
	ia, ib := -1, -1
	for i, gpu := range g.GPUs {
		switch gpu.UUID {
		case a:
			ia = i
		case b:
			ib = i
		}
	}
	return g.GPUs[ia].Links[ib], g.GPUs[ia].NUMANode, g.GPUs[ib].NUMANode
}

// version returns a job's current version.
func (e *env) version(id string) uint64 {
	job, _, err := e.nomad.Jobs().Info(id, nil)
	must.NoError(e.t, err)
	return *job.Version
}

func taskEnvOf(t *testing.T, e *env, a *api.Allocation, task string) map[string]string {
	t.Helper()
	var out map[string]string
	e.eventually(20*time.Second, "task output", func() bool {
		r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/"+task+".stdout.0", nil)
		if err != nil {
			return false
		}
		defer r.Close()
		b, _ := io.ReadAll(r)
		out = map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				out[k] = v
			}
		}
		return len(out) > 0
	})
	return out
}
