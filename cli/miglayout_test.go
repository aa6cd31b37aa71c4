package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/shoenig/test/must"
)

// status shows, per node with MIG GPUs, the layout the scheduler
// recommends, what it saves, and how to apply it on a busy node.
func TestStatusShowsMIGLayouts(t *testing.T) {
	gpu := func(ps ...string) miglayout.GPU {
		g := miglayout.GPU{Mode: devicefn.MIGWhole, SharesPerGPU: 100}
		for _, p := range ps {
			g.Instances = append(g.Instances, miglayout.Instance{Profile: p, Slices: int(p[0] - '0')})
		}
		return g
	}
	busy := gpu("3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb")
	busy.Instances[0].Used = 3
	nodes := []miglayout.Node{
		{ID: "a100-0000-1111", Name: "a100", Models: []miglayout.Model{{Model: "NVIDIA A100-SXM4-40GB", ParentSlices: 7, GPUs: []miglayout.GPU{busy}}}},
		{ID: "idle-0000-1111", Name: "idle", Models: []miglayout.Model{{Model: "NVIDIA A100-SXM4-40GB", ParentSlices: 7, GPUs: []miglayout.GPU{gpu("1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb")}}}},
	}
	rs := miglayout.Recommend(nodes, []miglayout.Demand{{Shares: 14, Weight: 6}}, miglayout.DefaultOptions)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/gpus", r.URL.Path)
		must.NoError(t, json.NewEncoder(w).Encode(service.GPUs{Map: &gpumap.Map{}, MIGLayouts: rs}))
	}))
	defer srv.Close()
	var out strings.Builder
	renderMIGLayouts(IO{Out: &out, Err: &out}, scheduler{addr: srv.URL})
	got := out.String()
	must.StrContains(t, got, "  a100  MIG layout for NVIDIA A100-SXM4-40GB: now 3g.20gb+2g.10gb+1g.5gb+1g.5gb, recommended 1g.5gb ×7: saves 42 shares of expected fragmentation (44 → 2)\n")
	must.StrContains(t, got, "    demand: 6 x 14 shares\n")
	must.StrContains(t, got, "    note: the plugin published no MIG profiles for this model: the standard table was assumed\n")
	must.StrContains(t, got, `to apply: put it in the plugin's configuration on a100 (mig { "NVIDIA A100-SXM4-40GB" = ["1g.5gb", `)
	must.StrContains(t, got, "1 of 1 GPUs are in use: drain the node (nomad node drain -enable -deadline 1h a100-0000-1111)")
	must.StrContains(t, got, "then nomad node drain -disable a100-0000-1111")
	must.StrContains(t, got, "  idle  MIG layout for NVIDIA A100-SXM4-40GB: now 1g.5gb ×7, kept (expected fragmentation 2 shares): the current layout is the best for this demand; the plugin published no MIG profiles for this model: the standard table was assumed\n")

	// a scheduler without MIG layouts, or that cannot be reached, adds nothing
	out.Reset()
	renderMIGLayouts(IO{Out: &out, Err: &out}, scheduler{addr: "http://127.0.0.1:1"})
	must.EqOp(t, "", out.String())
}
