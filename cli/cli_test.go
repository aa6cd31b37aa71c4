package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/shoenig/test/must"
)

func run(args ...string) (code int, out, errOut string) {
	var o, e strings.Builder
	code = Main(args, IO{Out: &o, Err: &e})
	return code, o.String(), e.String()
}

func TestUsage(t *testing.T) {
	code, _, errOut := run()
	must.Eq(t, 127, code)
	must.StrContains(t, errOut, "Commands:")
	code, _, errOut = run("frobnicate")
	must.Eq(t, 127, code)
	must.StrContains(t, errOut, `unknown command "frobnicate"`)
	code, out, _ := run("version")
	must.Eq(t, 0, code)
	must.StrContains(t, out, "gpushare v")
}

func TestFixtureFromTopoAndCheck(t *testing.T) {
	topo := filepath.Join("..", "fixtures", "topo", "dgx1_v100_topo_m.txt")
	code, out, errOut := run("fixture", "from-topo", "-model", "Tesla V100-SXM2-16GB", "-memory-mib", "16384", "-uuid-prefix", "abcdef01", topo)
	must.Eq(t, 0, code, must.Sprint(errOut))
	st, err := fixture.Parse("out.hcl", []byte(out))
	must.NoError(t, err)
	must.SliceLen(t, 8, st.Inventory.GPUs)
	must.Eq(t, "NV2", st.Inventory.Links[0][3].String())

	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	bad := filepath.Join(dir, "bad.hcl")
	must.NoError(t, os.WriteFile(good, []byte(out), 0o644))
	must.NoError(t, os.WriteFile(bad, []byte("gpu \"GPU-a\" {\n  model = \"m\"\n  memory_mib = -1\n  pci_bus_id = \"x\"\n}\n"), 0o644))
	code, out, errOut = run("fixture", "check", good, bad)
	must.Eq(t, 1, code)
	must.StrContains(t, out, "good.hcl: ok (8 x Tesla V100-SXM2-16GB)")
	must.StrContains(t, errOut, "bad.hcl:1,1-12: gpu \"GPU-a\": memory_mib must be positive")
}

func TestStatusWithoutNomad(t *testing.T) {
	code, _, errOut := run("status", "-address", "http://127.0.0.1:1")
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "is Nomad running?")
}

// status lists the groups the scheduler says wait, and notes a scheduler
// it cannot reach.
func TestStatusShowsWaitingGroups(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/groups", r.URL.Path)
		_, _ = w.Write([]byte(`[{"namespace":"default","job":"huge","group":"g","state":"refused","reason":"larger than any node: needs 16 GPUs"}]`))
	}))
	defer srv.Close()
	var out strings.Builder
	must.True(t, renderWaiting(IO{Out: &out, Err: &out}, scheduler{addr: srv.URL, how: "-scheduler"}))
	must.StrContains(t, out.String(), "1 group(s) refused for good (they never run as they are: change them):\n  default/huge/g  refused: larger than any node: needs 16 GPUs")
	must.StrNotContains(t, out.String(), "wait for gpushare")
	out.Reset()
	must.False(t, renderWaiting(IO{Out: &out, Err: &out}, scheduler{addr: "http://127.0.0.1:1", how: "-scheduler"}))
	must.StrContains(t, out.String(), "waiting groups not shown: the scheduler at http://127.0.0.1:1 (-scheduler) did not answer")
}

// job lint checks gpushare.vc against the scheduler's virtual clusters.
func TestJobLintChecksVC(t *testing.T) {
	useNomadBinary(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/profiles" {
			_, _ = w.Write([]byte(`[]`))
			return
		}
		if r.URL.Path == "/v1/gpus" {
			http.NotFound(w, r)
			return
		}
		must.EqOp(t, "/v1/vcs", r.URL.Path)
		_, _ = w.Write([]byte(`[{"name":"research","namespaces":["team-a"]}]`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "j.nomad.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`job "j" {
  meta = { "gpushare.vc" = "reserch" }
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 25 }
      }
    }
  }
}
`), 0o644))
	code, out, _ := run("job", "lint", "-scheduler", srv.URL, file)
	must.EqOp(t, 1, code)
	must.StrContains(t, out, `gpushare.vc = "reserch" names no virtual cluster of the scheduler (it has: research)`)
	code, out, _ = run("job", "lint", "-scheduler", "http://127.0.0.1:1", file)
	must.EqOp(t, 0, code)
	must.StrContains(t, out, "gpushare.vc not checked: the scheduler at http://127.0.0.1:1 (-scheduler) did not answer")
}

// /dev/null is a character device but no terminal: the demo must not wait
// for Ctrl-C when its input is /dev/null.
func TestDevNullIsNoTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	must.NoError(t, err)
	defer f.Close()
	must.False(t, isTerminal(f))
}

// job status prints the scheduler's view of a job's groups.
func TestJobStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/gpus" { // no map: nodes and GPUs named by their IDs
			http.NotFound(w, r)
			return
		}
		must.EqOp(t, "/v1/jobs/train", r.URL.Path)
		must.EqOp(t, "team-a", r.URL.Query().Get("namespace"))
		_, _ = w.Write([]byte(`{"namespace":"team-a","id":"train","type":"batch","status":"dead","groups":[
			{"name":"g","state":"refused","reason":"larger than any node: needs 16 GPUs"},
			{"name":"p","state":"pinned","placement":{"nodes":["n1"],"gpus":["GPU-1"],"shares":["GPU-1:9"]},"profile":{"name":"","sm_util":0.3,"mem_bw":0.2}},
			{"name":"h","state":"pinned","placement":{"nodes":["n1"],"gpus":["GPU-1"],"shares":["GPU-1:0"],"reason":"25 shares of GPU 0"},"allocations":["a1"]}]}`))
	}))
	defer srv.Close()
	code, out, errOut := run("job", "status", "-scheduler", srv.URL, "-namespace", "team-a", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "group g: refused\n    why: larger than any node: needs 16 GPUs")
	must.StrContains(t, out, "status dead: the batch job has finished")
	must.StrContains(t, out, "interference profile: from the job's meta (sm 0.30, memory bandwidth 0.20)")
	must.StrContains(t, out, "group h: pinned\n    pinned to 1 node(s), 1 GPU(s), 1 share(s):\n      on node n1: GPU-1 (1 share)\n    why: 25 shares of GPU 0\n    allocation a1: ")
	code, _, errOut = run("job", "status", "-scheduler", "http://127.0.0.1:1", "train")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "pass -scheduler")
}

// A profile the scheduler's configuration defines (profile "bert-large")
// passes lint against that scheduler, and is only a warning without it.
func TestJobLintKnowsTheSchedulersProfiles(t *testing.T) {
	useNomadBinary(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/profiles":
			_, _ = w.Write([]byte(`[{"name":"bert-large","sm_util":0.6,"mem_bw":0.4}]`))
		default:
			_, _ = w.Write([]byte(`[]`))
		}
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "j.nomad.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`job "j" {
  meta = { "gpushare.profile" = "bert-large" }
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 25 }
      }
    }
  }
}
`), 0o644))
	m := schedulerProfiles(scheduler{addr: srv.URL})
	must.NotNil(t, m)
	_, known := m.Lookup("bert-large")
	must.True(t, known)
	code, out, _ := run("job", "lint", "-scheduler", srv.URL, file)
	must.EqOp(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "ok")
	code, out, _ = run("job", "lint", "-scheduler", "", file)
	must.EqOp(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, `warning`)
	must.StrContains(t, out, `"bert-large" is not a known profile`)
}
