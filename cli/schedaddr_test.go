package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/hashicorp/go-hclog"

	"github.com/shoenig/test/must"
)

// fakeScheduler answers /v1/health (as leader or not) and /v1/jobs/train,
// and records the token of the last request.
func fakeScheduler(t *testing.T, leader bool, token *string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != nil {
			*token = r.Header.Get("X-Nomad-Token")
		}
		switch r.URL.Path {
		case "/v1/health":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "leader": leader})
		case "/v1/jobs/train":
			_, _ = w.Write([]byte(`{"namespace":"default","id":"train","groups":[{"name":"g","state":"pinned","reason":"from ` + strconv.FormatBool(leader) + `"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// cleanEnv clears what the CLI reads, so the machine's own settings do not
// leak into a test.
func cleanEnv(t *testing.T) {
	for _, k := range []string{EnvSchedulerAddr, EnvSchedulerToken, "NOMAD_TOKEN", "NOMAD_ADDR"} {
		t.Setenv(k, "")
	}
}

// GPUSHARE_ADDR points every command at the scheduler, as NOMAD_ADDR does
// for Nomad's CLI; the token goes with each request: GPUSHARE_TOKEN, else
// NOMAD_TOKEN.
func TestSchedulerFromTheEnvironment(t *testing.T) {
	cleanEnv(t)
	var token string
	srv := fakeScheduler(t, true, &token)
	t.Setenv(EnvSchedulerAddr, srv.URL)
	t.Setenv("NOMAD_TOKEN", "nomad-secret")
	code, out, errOut := run("job", "status", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "group g: pinned")
	must.EqOp(t, "nomad-secret", token)
	t.Setenv(EnvSchedulerToken, "gpushare-secret")
	code, _, _ = run("job", "status", "train")
	must.EqOp(t, 0, code)
	must.EqOp(t, "gpushare-secret", token)

	// the flag wins over the variable
	t.Setenv(EnvSchedulerAddr, "http://127.0.0.1:1")
	code, _, _ = run("job", "status", "-scheduler", srv.URL, "train")
	must.EqOp(t, 0, code)
	code, _, errOut = run("job", "status", "train")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "the scheduler at http://127.0.0.1:1 ($GPUSHARE_ADDR) did not answer")
}

// With no address given, the CLI finds the scheduler through the Nomad
// service the shipped job registers, in whatever namespace it runs, and
// prefers the replica that leads.
func TestSchedulerFoundThroughNomad(t *testing.T) {
	cleanEnv(t)
	follower := fakeScheduler(t, false, nil)
	leader := fakeScheduler(t, true, nil)
	reg := func(srv *httptest.Server, alloc string) map[string]any {
		u, _ := url.Parse(srv.URL)
		port, _ := strconv.Atoi(u.Port())
		return map[string]any{"ServiceName": SchedulerService, "Namespace": "gpushare", "AllocID": alloc, "Address": u.Hostname(), "Port": port}
	}
	var asked []string
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.Path+"?"+r.URL.RawQuery)
		switch r.URL.Path {
		case "/v1/services":
			must.EqOp(t, "*", r.URL.Query().Get("namespace"))
			_ = json.NewEncoder(w).Encode([]map[string]any{
				{"Namespace": "default", "Services": []map[string]any{{"ServiceName": "web"}}},
				{"Namespace": "gpushare", "Services": []map[string]any{{"ServiceName": SchedulerService}}},
			})
		case "/v1/service/" + SchedulerService:
			must.EqOp(t, "gpushare", r.URL.Query().Get("namespace"))
			_ = json.NewEncoder(w).Encode([]map[string]any{reg(follower, "aaaaaaaa-1"), reg(leader, "bbbbbbbb-2")})
		default:
			http.NotFound(w, r)
		}
	}))
	defer nomad.Close()
	code, out, errOut := run("job", "status", "-address", nomad.URL, "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "from true") // the leader answered
	must.SliceLen(t, 2, asked)

	s := (&schedulerFlag{}).resolve(&nomadFlags{address: nomad.URL})
	must.EqOp(t, leader.URL, s.addr)
	must.StrContains(t, s.how, "Nomad service gpushare-scheduler in namespace gpushare, the leader, allocation bbbbbbbb")

	// no Nomad: the default address, and the message says how it was chosen
	s = (&schedulerFlag{}).resolve(&nomadFlags{address: "http://127.0.0.1:1"})
	must.EqOp(t, defaultSchedulerAddr, s.addr)
	must.StrContains(t, s.hint(), "Nomad did not answer when asked for the service gpushare-scheduler")
	must.StrContains(t, s.hint(), "so the scheduler was looked for at the default address "+defaultSchedulerAddr)

	// no such service
	empty := serveJSON(t, map[string]any{"/v1/services": []any{}})
	s = (&schedulerFlag{}).resolve(&nomadFlags{address: empty})
	must.EqOp(t, defaultSchedulerAddr, s.addr)
	must.StrContains(t, s.hint(), "no GPUSHARE_ADDR and no Nomad service gpushare-scheduler found")
}

// status needs the scheduler for the groups that wait: one it cannot reach
// makes it fail, saying so; -scheduler "" skips them and succeeds.
func TestStatusFailsWithoutTheScheduler(t *testing.T) {
	cleanEnv(t)
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/nodes", "/v1/allocations":
			_, _ = w.Write([]byte(`[]`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer nomad.Close()
	t.Setenv(EnvSchedulerAddr, "http://127.0.0.1:1")
	code, _, errOut := run("status", "-address", nomad.URL)
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "waiting groups not shown: the scheduler at http://127.0.0.1:1 ($GPUSHARE_ADDR) did not answer")
	code, _, errOut = run("status", "-address", nomad.URL, "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
}

// A Nomad that refuses the token is not "not running": the message says
// what the token needs.
func TestStatusSaysWhenNomadRefusesTheToken(t *testing.T) {
	cleanEnv(t)
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	defer nomad.Close()
	code, _, errOut := run("status", "-address", nomad.URL, "-scheduler", "")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, `Nomad refused the token (403 Permission denied): set NOMAD_TOKEN or -token to a token with node { policy = "read" }`)
	must.StrNotContains(t, errOut, "is Nomad running")
}

// The scheduler gives the Go runtime the soft memory limit its
// configuration sets, or its cgroup's (90%), and logs where it came from.
func TestSchedulerAppliesItsMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	t.Setenv("GOMEMLIMIT", "")
	var log strings.Builder
	logger := hclog.New(&hclog.LoggerOptions{Output: &log})
	must.Eq(t, int64(3<<30), applyMemoryLimit("3GiB", logger, fstest.MapFS{}))
	must.Eq(t, int64(3<<30), debug.SetMemoryLimit(-1))
	must.StrContains(t, log.String(), "memory limit: limit=\"3.0GiB (memory_limit)\"")
	cg := fstest.MapFS{
		"proc/self/cgroup": {Data: []byte("0::/nomad.slice/a.sched.scope\n")},
		"sys/fs/cgroup/nomad.slice/a.sched.scope/memory.max": {Data: []byte("1073741824\n")},
	}
	must.Eq(t, int64(966367641), applyMemoryLimit("", logger, cg))
	must.StrContains(t, log.String(), "90% of 1.0GiB, the memory limit of cgroup /nomad.slice/a.sched.scope")
}
