package openb

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// TestReplayByHand: two 1-GPU nodes and pods of 0.5, 0.5 and 1 GPU. A
// packing policy puts both halves on one GPU and the whole pod on the
// other: after the pods, arrived = allocated = 25%, 50% and 100% of 2,000
// milli.
func TestReplayByHand(t *testing.T) {
	nodes := []Node{{"a", 8000, 1 << 20, 1, "T4"}, {"b", 8000, 1 << 20, 1, "T4"}}
	pods := []Pod{{Name: "p1", CPU: 1000, NumGPU: 1, GPUMilli: 500}, {Name: "p2", CPU: 1000, NumGPU: 1, GPUMilli: 500},
		{Name: "p3", CPU: 1000, NumGPU: 1, GPUMilli: 1000}}
	w := Workload{Pods: pods, NodeOrder: []int{0, 1}, CapacityMilli: 2000}
	for _, pol := range []string{"best-fit", "gpu-packing", "fgd", "gpushare"} {
		t.Run(pol, func(t *testing.T) {
			r, err := Replay("tiny", pol, 42, nodes, w, Mix(pods, 1), nil)
			must.NoError(t, err)
			must.EqOp(t, 3, r.Placed)
			must.Eq(t, 25.0, r.Alloc[25])
			must.Eq(t, 50.0, r.Alloc[50])
			must.Eq(t, 100.0, r.Alloc[100])
			must.Eq(t, 100.0, r.Alloc[101]) // an empty bin takes bin x-1's mean
			must.True(t, math.IsNaN(r.Alloc[130]))
		})
	}
	// Spreading the halves leaves no whole GPU for p3: first-fit by node
	// order does not, but a policy that puts p2 on node b must fail p3.
	r, err := Replay("tiny", "random", 7, nodes, w, Mix(pods, 1), nil)
	must.NoError(t, err)
	must.True(t, r.Placed == 3 || r.Alloc[100] == 50, must.Sprintf("placed %d, alloc %v", r.Placed, r.Alloc[100]))
}

func TestWriteDir(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a trace")
	}
	rep, err := Run(t.Context(), Config{Data: Embedded(), Traces: []string{"default"}, Policies: []string{"best-fit"}, Seeds: []int64{42}, Limits: true, Workers: 2})
	must.NoError(t, err)
	dir := t.TempDir()
	must.NoError(t, rep.WriteDir(dir, "svg"))
	for _, f := range []string{"openb.md", "openb_summary.csv", "openb_validation.csv", "openb_alloc_ratio.csv", "openb_alloc_default.svg", "openb_alloc_default_zoom.svg",
		"openb_limits.csv", "openb_limits_seeds.csv", "openb_stranded.csv"} {
		_, err := os.Stat(filepath.Join(dir, f))
		must.NoError(t, err, must.Sprint(f))
	}
	md, _ := os.ReadFile(filepath.Join(dir, "openb.md"))
	must.StrContains(t, string(md), "| default | best-fit | 130 |")
	must.StrContains(t, string(md), "## How close to the limit")
	// The offline packer and the bound at 100% and 130%: the offline
	// packer beats online best-fit at 130%, and nothing beats the bound.
	must.SliceLen(t, 2, rep.Limits)
	online := rep.Results[0].Alloc[MaxDemand]
	l := rep.Limits[1]
	must.EqOp(t, MaxDemand, l.Demand)
	must.Greater(t, online, float64(l.Offline))
	must.LessEq(t, float64(l.Bound), float64(l.Offline))
	must.LessEq(t, 100, float64(l.Bound))
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Run(ctx, Config{Data: Embedded(), Traces: []string{"default"}, Policies: []string{"fgd"}, Seeds: []int64{42}})
	must.ErrorIs(t, err, context.Canceled)
	_, err = Run(t.Context(), Config{Data: Embedded(), Traces: []string{"default"}, Policies: []string{"magic"}, Seeds: []int64{42}})
	must.ErrorContains(t, err, "unknown policy")
	_, err = Run(t.Context(), Config{Data: Embedded(), Traces: []string{"default"}, Policies: []string{"fgd"}, Seeds: []int64{42}, GpushareCoverage: 2})
	must.ErrorContains(t, err, "coverage")
}
