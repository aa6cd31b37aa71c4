package placement_test

import (
	"fmt"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
)

func Example() {
	s := placement.NewSnapshot()
	dgx1 := topologies.MustGet(topologies.DGX1V100)
	for _, id := range []string{"dgx-a", "dgx-b"} {
		n, _ := placement.NodeFromSpec(placement.NodeSpec{ID: id, Rack: "r1", CPU: 80000, MemoryMiB: 512 << 10,
			GPUs: 8, Model: "Tesla V100-SXM2-16GB", Links: dgx1.Links, NUMA: dgx1.NUMA})
		_ = s.AddNode(n)
	}
	p, _ := placement.New(placement.PolicyGpushare, placement.Options{})

	for _, r := range []placement.Request{
		{ID: "train", Count: 1, Shares: 400, Res: placement.Resources{CPU: 8000, MemoryMiB: 32768}},
		{ID: "notebook", Count: 1, Shares: 25, Res: placement.Resources{CPU: 1000, MemoryMiB: 4096}},
		{ID: "too-big", Count: 1, Shares: 1600},
	} {
		d := p.Decide(s, r)
		if !d.Placed() {
			fmt.Println(r.ID, "refused:", d.Refusal)
			continue
		}
		_ = s.Apply(d)
		pl := d.Placements[0]
		fmt.Printf("%s: %d shares on %s, %s\n  %s\n", r.ID, len(pl.Shares), pl.Node, pl.Cell, pl.Reason)
	}
	// Output:
	// train: 400 shares on dgx-a, NV1 NUMA quad {0-3}
	//   4 GPUs {0-3} in NV1 NUMA quad {0-3} on node dgx-a, worst link NV1; fragmentation +0.20 GPU
	// notebook: 25 shares on dgx-a, gpu 4
	//   25 shares of GPU 4 on node dgx-a; fragmentation +0.74 GPU; alone on its GPU
	// too-big refused: larger than any node: needs 16 GPUs of any model on one node; the largest node has 8
}
