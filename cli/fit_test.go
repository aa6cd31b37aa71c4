package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// gpushare job run's preview checks a group against the job's own rules
// and its device block's constraints, as the scheduler does: a group no
// node of its datacenters holds waits; one constrained to a MIG profile
// fits on an instance of that profile, not on the exact fit of another.
func TestCheckFitHonoursTheJobsRules(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	node := &api.Node{ID: "a100-0000-1111", Name: "a100", Datacenter: "dc1", Status: "ready", SchedulingEligibility: "eligible",
		Drivers:       map[string]*api.DriverInfo{"raw_exec": {Detected: true, Healthy: true}},
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536}}}
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		node.NodeResources.Devices = append(node.NodeResources.Devices, nomadattr.Device(&g))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/nodes":
			_ = json.NewEncoder(w).Encode([]*api.NodeListStub{{ID: node.ID, Name: node.Name}})
		case "/v1/node/" + node.ID:
			_ = json.NewEncoder(w).Encode(node)
		case "/v1/allocations":
			_ = json.NewEncoder(w).Encode([]*api.AllocationListStub{})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)

	job := func(dc string, cons ...*api.Constraint) *api.Job {
		id, name, shares := "infer", "g", uint64(14)
		return &api.Job{ID: &id, Name: &id, Datacenters: []string{dc}, TaskGroups: []*api.TaskGroup{{
			Name: &name, Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Driver: "raw_exec", Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(64),
				Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: &shares, Constraints: cons}}}}},
		}}}
	}
	check := func(j *api.Job) string {
		var out, errOut bytes.Buffer
		must.NoError(t, checkFit(t.Context(), client, j, nil, IO{Out: &out, Err: &errOut}))
		return out.String()
	}
	// a preview: the node is an example, the scheduler decides
	must.StrContains(t, check(job("dc1")), "group g fits now, for example on node a100 (14 shares of MIG instance")
	must.StrContains(t, check(job("dc1")), "; the scheduler decides when it places the job\n")
	must.StrContains(t, check(job("dc1")), "1g.5gb")
	got := check(job("dc1", &api.Constraint{LTarget: "${device.attr.mig_profile}", Operand: "=", RTarget: "3g.20gb"}))
	must.StrContains(t, got, "fits now")
	must.StrContains(t, got, "3g.20gb")
	must.StrContains(t, check(job("dc2")), "group g does not fit now and will wait at the gate: no node its own rules allow")
}

// The preview names the allocations a fraction would share a GPU with as
// Nomad's CLI does (8 characters), not by their whole UUIDs (issue 47
// point 8).
func TestFitsNowNamesAllocationsShort(t *testing.T) {
	got := fitsNow("g", "node-1", "shares its GPU with 74b56330-77a2-4c1e-9d3f-0123456789ab (compute): predicted 0.91x of alone for web (memory)")
	must.StrContains(t, got, "shares its GPU with 74b56330 (compute)")
	must.StrNotContains(t, got, "77a2")
}
