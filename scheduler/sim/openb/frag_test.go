package openb

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

func TestNodeFrag(t *testing.T) {
	nodes := []Node{{"a", 8000, 1 << 20, 2, "T4"}, {"b", 8000, 1 << 20, 2, "T4"}}
	s, err := Snapshot(nodes, []int{0, 1})
	must.NoError(t, err)
	pol, err := placement.New(placement.PolicyBestFit, placement.Options{})
	must.NoError(t, err)
	// Node a: 0.7 GPU used on GPU 0, leaving 30 and 100 shares free.
	d := pol.Decide(s, Request(Pod{Name: "p", CPU: 1000, NumGPU: 1, GPUMilli: 700}))
	must.NoError(t, s.Apply(d))
	a, _ := s.Node(d.Placements[0].Node)
	cases := []struct {
		name string
		mix  placement.Mix
		want float64 // GPUs
	}{
		// A half GPU fits GPU 1: only GPU 0's 30 shares are fragmented.
		{"half GPU", placement.Mix{{Shares: 50, Weight: 1}}, 0.3},
		// Two whole GPUs do not fit: all 1.3 free GPUs are.
		{"two GPUs", placement.Mix{{Shares: 200, Weight: 1}}, 1.3},
		// CPU-only requests count all free GPU capacity.
		{"cpu only", placement.Mix{{CPU: 1000, Weight: 1}}, 1.3},
		// Too little CPU: nothing fits.
		{"cpu short", placement.Mix{{CPU: 9000, Shares: 50, Weight: 1}}, 1.3},
		// Another model: nothing fits.
		{"model", placement.Mix{{Shares: 50, Models: []string{"V100"}, Weight: 1}}, 1.3},
		{"weighted", placement.Mix{{Shares: 50, Weight: 0.5}, {Shares: 200, Weight: 0.5}}, 0.8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, free := NodeFrag(a, c.mix)
			must.InDelta(t, c.want, f, 1e-9)
			must.InDelta(t, 1.3, free, 1e-9)
			// The placement core's own measure agrees on the whole cluster.
			sum := 0.0
			for _, n := range s.Nodes() {
				v, _ := NodeFrag(n, c.mix)
				sum += v
			}
			must.InDelta(t, placement.Fragmentation(s, c.mix), sum, 1e-9)
		})
	}
}

// A shared MIG instance's free shares count as shares of its parent, all
// fragmented for whole-GPU requests (even an idle 7g instance's), as in
// the placement core's measure.
func TestNodeFragMIG(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	n, err := placement.NodeFromGroups("m", "m", placement.Resources{CPU: 8000, MemoryMiB: 1 << 20}, nil,
		devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil))
	must.NoError(t, err)
	s := placement.NewSnapshot()
	must.NoError(t, s.AddNode(n))
	for _, c := range []struct {
		mix  placement.Mix
		want float64
	}{
		{placement.Mix{{Shares: 100, Weight: 1}}, 1.98}, // 14+14+28+42+100 shares free
		{placement.Mix{{Shares: 50, Weight: 1}}, 0.98},  // all but the 7g's
		{placement.Mix{{Shares: 14, Weight: 1}}, 0},
	} {
		f, free := NodeFrag(n, c.mix)
		must.InDelta(t, c.want, f, 1e-9)
		must.InDelta(t, 1.98, free, 1e-9)
		must.InDelta(t, placement.Fragmentation(s, c.mix), f, 1e-9)
	}
}
