package service

import (
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

const (
	migA100 = "NVIDIA A100-SXM4-40GB"
	mig3g   = "MIG-a2000000-0000-4000-8000-000000000001"
)

// a100MIG is a node of the A100 MIG fixture offering its instances whole:
// GPU 0 as 3g.20gb+2g.10gb+1g.5gb+1g.5gb, GPU 1 as one 7g.40gb.
func a100MIG(t *testing.T) *api.Node {
	t.Helper()
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	n := &api.Node{ID: "node-a100", Name: "a100", Status: "ready", SchedulingEligibility: "eligible",
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536}}}
	for _, g := range devicefn.MIGGroups(&st.Inventory, nil) {
		d := nomadattr.MIGDevice(&g)
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	return n
}

// /v1/gpus recommends a layout for each node's MIG GPUs from what the
// managed groups ask and run: here 14-share requests (one running, three
// waiting) and one running 3g.20gb instance, whatever the token; the
// demand is told in sizes, never by job.
func TestGPUsRecommendMIGLayouts(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t), a100MIG(t)}, jobs: map[string]*api.Job{},
		tokens: map[string][]string{"a": {"team-a", "nodes"}, "b": {"team-b", "nodes"}}}
	fraction(t, f, "team-a", "secret-small", 0, 0, 14)
	wait := gated("secret-wait", 14)
	wait.Namespace, wait.TaskGroups[0].Count = ptr("team-a"), ptr(3)
	f.put(wait)
	big := gated("secret-big", 0)
	big.Namespace = ptr("team-b")
	big.TaskGroups[0].Constraints = nil
	big.TaskGroups[0].Tasks[0].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpushare-mig/3g.20gb", Count: ptr(uint64(1))}}
	f.put(big)
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-secret-big", Namespace: "team-b", JobID: "secret-big", TaskGroup: "g",
		NodeID: "node-a100", DesiredStatus: "run", ClientStatus: "running",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare-mig", Name: "3g.20gb", DeviceIDs: []string{mig3g}}}}}}})
	// a stopped job and a template ask for nothing
	stopped := gated("stopped", 42)
	stopped.Stop = ptr(true)
	f.put(stopped)
	s := withConfig(t, f, func(c *config.Config) { c.HTTPRequireToken = ptr(true) })

	var seen []miglayout.Recommendation
	for _, token := range []string{"a", "b"} {
		req := apiRequest("GET", "/v1/gpus", nil)
		req.Header.Set("X-Nomad-Token", token)
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, req)
		must.EqOp(t, http.StatusOK, rr.Code)
		var body GPUs
		must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &body))
		must.SliceLen(t, 2, body.Nodes) // the map is still there
		must.SliceLen(t, 1, body.MIGLayouts)
		r := body.MIGLayouts[0]
		must.Eq(t, "a100", r.Node)
		must.Eq(t, migA100, r.Model)
		must.Eq(t, "whole", r.Mode)
		must.Eq(t, 1, r.Busy) // the 3g.20gb instance is held
		must.Eq(t, []miglayout.GPULayout{
			{Index: 0, UUID: "GPU-a2000000-0000-4000-8000-000000000000", Layout: []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, Busy: true},
			{Index: 1, UUID: "GPU-a2000000-0000-4000-8000-000000000001", Layout: []string{"7g.40gb"}}}, r.CurrentByGPU)
		must.Eq(t, []miglayout.Size{{Profile: "3g.20gb", Weight: 1}, {Shares: 14, Weight: 4}}, r.Demand)
		must.True(t, r.Change)
		must.Eq(t, "1g.5gb ×7", miglayout.Format(r.Recommended))
		// GPU 0: .8 x 44 + .2 x 57.14; GPU 1: .8 x 86 + .2 x 100; each 7 x 1g: .8 x 2 + .2 x 100
		must.Eq(t, 135.43, r.Fragmentation.Current.Shares)
		must.Eq(t, 43.2, r.Fragmentation.Recommended.Shares)
		must.Eq(t, 92.23, r.Saving.Shares)
		must.StrContains(t, r.Config, `mig { "NVIDIA A100-SXM4-40GB" = ["1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"] }`)
		layouts, err := json.Marshal(body.MIGLayouts)
		must.NoError(t, err)
		must.StrNotContains(t, string(layouts), "secret")
		must.StrNotContains(t, string(layouts), "team-")
		if token == "b" {
			must.StrNotContains(t, rr.Body.String(), "secret-small")
		}
		if seen != nil {
			must.Eq(t, seen, body.MIGLayouts) // the same for every token
		}
		seen = body.MIGLayouts
	}

	// the web page shows it too, with the line to paste and how to apply it
	req := apiRequest("GET", "/ui", nil)
	req.Header.Set("X-Nomad-Token", "a")
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, req)
	must.EqOp(t, http.StatusOK, rr.Code, must.Sprint(rr.Body.String()))
	page := html.UnescapeString(rr.Body.String())
	must.StrContains(t, page, "<h2>MIG layouts</h2>")
	must.StrContains(t, page, "recommended 1g.5gb ×7: saves 92.2 shares of expected fragmentation (135.4 → 43.2)")
	must.StrContains(t, page, "1 x 3g.20gb, 4 x 14 shares")
	must.StrContains(t, page, `mig { "NVIDIA A100-SXM4-40GB" = ["1g.5gb"`)
	must.StrContains(t, page, "nomad node drain -enable -deadline 1h node-a100")
}

// Without MIG-enabled GPUs /v1/gpus has no mig_layouts; with them but no
// demand, each says that nothing is recommended.
func TestGPUsWithoutMIGOrDemand(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	fraction(t, f, "default", "small", 0, 0, 14)
	s := newTestService(t, f)
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/gpus", nil))
	must.EqOp(t, http.StatusOK, rr.Code)
	must.StrNotContains(t, rr.Body.String(), "mig_layouts")

	s = newTestService(t, &fakeNomad{nodes: []*api.Node{a100MIG(t)}, jobs: map[string]*api.Job{}})
	rr = httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/gpus", nil))
	var body GPUs
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &body))
	must.SliceLen(t, 1, body.MIGLayouts)
	must.False(t, body.MIGLayouts[0].Change)
	must.Nil(t, body.MIGLayouts[0].Recommended)
	must.StrContains(t, body.MIGLayouts[0].Note, "no fractional demand")
}
