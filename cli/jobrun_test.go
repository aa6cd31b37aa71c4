package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fakeNomad is a Nomad agent for `gpushare job run`: it parses every
// jobspec into parsed, holds one node of the DGX A100 fixture (8 GPUs),
// no allocations, no job, and registers jobs as Nomad does a periodic or
// parameterized one: without an evaluation.
type fakeNomad struct {
	srv        *httptest.Server
	parsed     *api.Job
	mu         sync.Mutex
	registered []*api.Job
}

func newFakeNomad(t *testing.T, parsed *api.Job) *fakeNomad {
	t.Helper()
	st, err := fixture.ParseShipped(fixtures.DGXA100)
	must.NoError(t, err)
	node := &api.Node{ID: "dgx-0000-1111", Name: "dgx", Datacenter: "dc1", Status: "ready", SchedulingEligibility: "eligible",
		Drivers:       map[string]*api.DriverInfo{"raw_exec": {Detected: true, Healthy: true}},
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536}}}
	for _, g := range devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		node.NodeResources.Devices = append(node.NodeResources.Devices, nomadattr.Device(&g))
	}
	f := &fakeNomad{parsed: parsed}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/jobs/parse":
			_ = json.NewEncoder(w).Encode(f.parsed)
		case r.URL.Path == "/v1/jobs" && (r.Method == http.MethodPut || r.Method == http.MethodPost):
			var req api.JobRegisterRequest
			must.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			f.mu.Lock()
			f.registered = append(f.registered, req.Job)
			f.mu.Unlock()
			_ = json.NewEncoder(w).Encode(api.JobRegisterResponse{EvalID: "", JobModifyIndex: 10})
		case r.URL.Path == "/v1/nodes":
			_ = json.NewEncoder(w).Encode([]*api.NodeListStub{{ID: node.ID, Name: node.Name}})
		case r.URL.Path == "/v1/node/"+node.ID:
			_ = json.NewEncoder(w).Encode(node)
		case r.URL.Path == "/v1/allocations" || strings.HasSuffix(r.URL.Path, "/allocations"):
			_ = json.NewEncoder(w).Encode([]*api.AllocationListStub{})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// quarterJob is a job of one group asking for 25 shares, ungated.
func quarterJob(id string) *api.Job {
	name, shares := "g", uint64(25)
	return &api.Job{ID: &id, Name: &id, Type: ptr("batch"), Datacenters: []string{"dc1"}, TaskGroups: []*api.TaskGroup{{
		Name: &name,
		Tasks: []*api.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"},
			Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(64), Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: &shares}}}}},
	}}}
}

func jobFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "j.nomad.hcl")
	must.NoError(t, os.WriteFile(file, []byte("# parsed by the fake Nomad\n"), 0o644))
	return file
}

// `gpushare job run` of a periodic or parameterized job registers it
// gated, says what it is and what happens next, and returns at once: Nomad
// makes no evaluation for such a parent and never places it, so waiting
// for its allocations would only run out the timeout.
func TestJobRunOfATemplateJobReturns(t *testing.T) {
	periodic := quarterJob("cron")
	periodic.Periodic = &api.PeriodicConfig{Spec: ptr("*/5 * * * *")}
	dispatch := quarterJob("infer")
	dispatch.ParameterizedJob = &api.ParameterizedJobConfig{}
	for _, tc := range []struct {
		job  *api.Job
		want []string
	}{
		{periodic, []string{`registered cron, a periodic job (cron "*/5 * * * *")`, "launches a child job (cron/periodic-<time>) on its schedule, each placed by gpushare"}},
		{dispatch, []string{"registered infer, a parameterized job", "gpushare pins it to a pool of GPUs", "nomad job dispatch infer",
			"Dispatch once `gpushare job status infer` shows it pinned"}},
	} {
		t.Run(*tc.job.ID, func(t *testing.T) {
			nomad := newFakeNomad(t, tc.job)
			code, out, errOut := run("job", "run", "-address", nomad.srv.URL, "-scheduler", "", "-timeout", "3s", jobFile(t))
			must.EqOp(t, 0, code, must.Sprintf("out:\n%s\nerr:\n%s", out, errOut))
			for _, w := range tc.want {
				must.StrContains(t, out, w)
			}
			must.StrNotContains(t, out, "(evaluation )")
			must.StrNotContains(t, errOut, "not running yet")
			must.SliceLen(t, 1, nomad.registered)
			must.Eq(t, []string{"g"}, pin.Gated(nomad.registered[0]))
		})
	}
}
