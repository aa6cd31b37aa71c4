package openb

import (
	"testing"

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
