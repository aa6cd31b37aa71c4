package cells

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// The leaf order of a DGX-1 V100 puts each double-NVLink pair together,
// which index order does not; on servers whose best pairs are index pairs
// it is index order. Every run of the order that starts at a multiple of a
// cell's size is a cell, so taking GPUs in this order fills the smallest
// best-connected cell first.
func TestLeafOrder(t *testing.T) {
	for _, c := range []struct {
		topo  string
		order []int
	}{
		{topologies.DGX1V100, []int{0, 3, 1, 2, 4, 7, 5, 6}},
		{topologies.DGX1PCIe, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{topologies.HGXH100, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{topologies.DGXA100, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{topologies.PCIe2Socket, []int{0, 1, 2, 3}},
	} {
		t.Run(c.topo, func(t *testing.T) {
			tree := build(t, c.topo)
			order := tree.LeafOrder()
			must.Eq(t, c.order, order)
			ranks := tree.Ranks()
			for r, g := range order {
				must.Eq(t, r, ranks[g])
			}
			for _, size := range []int{2, 4} {
				for at := 0; at+size <= len(order); at += size {
					run := append([]int(nil), order[at:at+size]...)
					must.Eq(t, size, tree.Cells[tree.Smallest(run)].Size(), must.Sprintf("GPUs %v form a cell", run))
				}
			}
		})
	}
	empty := &Tree{Root: -1}
	must.Nil(t, empty.LeafOrder())
	must.SliceEmpty(t, empty.Ranks())
}
