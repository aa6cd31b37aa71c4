package placement

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

func TestDGX1CubeMesh(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "dgx1", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100), Model: "V100"})
	p := policy(t, PolicyGpushare, Options{})

	// A 2-GPU job gets an NV2 pair.
	d := place(t, s, p, Request{ID: "two", Shares: 200})
	must.Eq(t, []int{0, 3}, gpuIdx(d.Placements[0]))
	must.StrContains(t, d.Placements[0].Cell, "NV2 pair")

	// A 4-GPU job gets the untouched NVLink quad of the other socket.
	d = place(t, s, p, Request{ID: "four", Shares: 400})
	must.Eq(t, []int{4, 5, 6, 7}, gpuIdx(d.Placements[0]))
	must.StrContains(t, d.Placements[0].Reason, "worst link NV1")

	// The next pair is the other NV2 pair of the first socket.
	d = place(t, s, p, Request{ID: "two-b", Shares: 200})
	must.Eq(t, []int{1, 2}, gpuIdx(d.Placements[0]))
}

func TestDGX1NeverCrossesSocketsWhenAQuadIsFree(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "dgx1", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "one", Shares: 100})
	d := place(t, s, p, Request{ID: "four", Shares: 400})
	idx := gpuIdx(d.Placements[0])
	must.True(t, idx[0] >= 4 || idx[3] <= 3, must.Sprintf("quad %v crosses sockets", idx))
	must.StrNotContains(t, d.Placements[0].Reason, "SYS")
}

func TestDGX1PairsAcrossNodesKeepQuadsWhole(t *testing.T) {
	s := cluster(t,
		NodeSpec{ID: "a", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)},
		NodeSpec{ID: "b", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)})
	p := policy(t, PolicyGpushare, Options{})
	// Four pairs fill two quads on one node rather than breaking four quads.
	nodes := map[string]int{}
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		d := place(t, s, p, Request{ID: id, Shares: 200})
		nodes[d.Placements[0].Node]++
		must.StrContains(t, d.Placements[0].Cell, "NV2 pair")
	}
	must.Eq(t, 1, len(nodes))
	// So an 8-GPU job still fits.
	d := place(t, s, p, Request{ID: "eight", Shares: 800})
	must.Eq(t, 8, len(d.Placements[0].GPUs))
}

func TestH100AllEqualPackingDecides(t *testing.T) {
	s := cluster(t,
		NodeSpec{ID: "h1", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)},
		NodeSpec{ID: "h2", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)})
	p := policy(t, PolicyGpushare, Options{})
	var nodes []string
	for _, id := range []string{"a", "b", "c"} {
		d := place(t, s, p, Request{ID: id, Shares: 200})
		nodes = append(nodes, d.Placements[0].Node)
		must.StrContains(t, d.Placements[0].Reason, "worst link NV18")
	}
	must.Eq(t, []string{"h1", "h1", "h1"}, nodes)
}

func TestPCIeTwoSocketPairStaysUnderOneSocket(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "pcie", GPUs: 4, Links: links(topologies.PCIe2Socket), NUMA: numa(topologies.PCIe2Socket)})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "one", Shares: 100})
	d := place(t, s, p, Request{ID: "two", Shares: 200})
	must.Eq(t, []int{2, 3}, gpuIdx(d.Placements[0]))
	must.StrContains(t, d.Placements[0].Reason, "worst link PHB")
}

func TestSYSOnlyWhenNothingBetterIsFree(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "pcie", GPUs: 4, Links: links(topologies.PCIe2Socket), NUMA: numa(topologies.PCIe2Socket)})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "a", Shares: 100})
	place(t, s, p, Request{ID: "b", Shares: 100})
	// GPUs 0 and 2 are taken... or 0 and 1: either way one left per socket
	// or one pair left; a pair must use the best remaining link.
	d := place(t, s, p, Request{ID: "two", Shares: 200})
	must.StrContains(t, d.Placements[0].Reason, "worst link PHB")
}

func TestMultiNodeGroupPrefersOneRack(t *testing.T) {
	s := cluster(t,
		NodeSpec{ID: "a1", Rack: "a", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)},
		NodeSpec{ID: "b1", Rack: "b", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)},
		NodeSpec{ID: "a2", Rack: "a", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)},
		NodeSpec{ID: "b2", Rack: "b", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)},
		NodeSpec{ID: "b3", Rack: "b", GPUs: 8, Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)})
	p := policy(t, PolicyGpushare, Options{})
	d := place(t, s, p, Request{ID: "dist", Count: 3, Shares: 800})
	var nodes []string
	for _, pl := range d.Placements {
		nodes = append(nodes, pl.Node)
		must.StrContains(t, pl.Reason, "rack b")
	}
	must.SliceContainsAll(t, []string{"b1", "b2", "b3"}, nodes)
}

func TestHivedBaselineUsesCellsWithoutSharing(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "dgx1", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)})
	p := policy(t, PolicyHived, Options{})
	d := place(t, s, p, Request{ID: "quarter", Shares: 25})
	must.Eq(t, 100, len(d.Placements[0].Shares))
	d = place(t, s, p, Request{ID: "pair", Shares: 200})
	must.StrContains(t, d.Placements[0].Cell, "NV2 pair")
}

func TestDGXA100AndPCIeViewCells(t *testing.T) {
	s := cluster(t,
		NodeSpec{ID: "a100", GPUs: 8, Links: links(topologies.DGXA100), NUMA: numa(topologies.DGXA100)},
		NodeSpec{ID: "pcie", GPUs: 8, Links: links(topologies.DGX1PCIe), NUMA: numa(topologies.DGX1PCIe)})
	p := policy(t, PolicyGpushare, Options{})
	// NVLink everywhere beats the PCIe-only server for a 4-GPU job.
	d := place(t, s, p, Request{ID: "four", Shares: 400})
	must.Eq(t, "a100", d.Placements[0].Node)
	must.StrContains(t, d.Placements[0].Reason, "worst link NV12")
	// On the PCIe-only view a pair under one PCIe switch (PIX) is chosen.
	d = place(t, s, p, Request{ID: "pair", Shares: 200, Avoid: []string{"a100"}})
	must.StrContains(t, d.Placements[0].Reason, "worst link PIX")
}

func TestUnhealthyGPUsAreSkipped(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n", GPUs: 4, Links: links(topologies.PCIe2Socket), NUMA: numa(topologies.PCIe2Socket)})
	must.NoError(t, s.SetHealth("GPU-n-0", false))
	p := policy(t, PolicyGpushare, Options{})
	d := place(t, s, p, Request{ID: "pair", Shares: 200})
	must.Eq(t, []int{2, 3}, gpuIdx(d.Placements[0]))
	d = p.Decide(s, Request{ID: "pair-2", Count: 1, Shares: 200})
	must.False(t, d.Placed())
	must.NoError(t, s.SetHealth("GPU-n-0", true))
	d = place(t, s, p, Request{ID: "pair-3", Shares: 200})
	must.Eq(t, []int{0, 1}, gpuIdx(d.Placements[0]))
	must.ErrorIs(t, s.SetHealth("GPU-x", true), ErrUnknown)
}

func TestNodeCells(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "dgx", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)})
	place(t, s, policy(t, PolicyGpushare, Options{}), Request{ID: "pair", Shares: 200})
	n, _ := s.Node("dgx")
	cs := n.Cells()
	must.Eq(t, 15, len(cs)) // 8 GPUs, 4 pairs, 2 quads, the node
	must.Eq(t, "SYS node octet {0-7}", cs[0].Name)
	must.Eq(t, 6, cs[0].FreeGPUs)
	u := s.Usage()
	must.Eq(t, 2.0, u.AllocatedGPUs)
	must.Eq(t, 6, u.WholeFreeGPUs)
}
