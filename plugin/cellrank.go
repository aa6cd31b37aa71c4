package plugin

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
)

// cellRanks gives each GPU of the inventory, by position, its rank in
// the node's cell order (devicefn.AttrCellRank): the leaf order of the
// cell tree the scheduler builds from the same link matrix and NUMA
// nodes (cells.Tree.Ranks), so that a node pin asking Nomad for low ranks
// has it take the node's GPUs best cell first. Where no tree can be built
// (a matrix that does not validate), rank is the position: index order,
// what the index affinities of older pins ask for.
func cellRanks(inv *devicefn.Inventory) []int {
	numa := make([]int, len(inv.GPUs))
	for i, g := range inv.GPUs {
		numa[i] = g.NUMANode
	}
	if tree, err := cells.Build(inv.Links, numa); err == nil && len(inv.Links) == len(inv.GPUs) {
		return tree.Ranks()
	}
	out := make([]int, len(inv.GPUs))
	for i := range out {
		out[i] = i
	}
	return out
}

// rankGPUGroups sets each per-GPU group's cell rank (gs are the
// inventory's GPUs, by NVML index, as devicefn.GPUGroups returns them).
func rankGPUGroups(inv *devicefn.Inventory, gs []devicefn.GPUGroup) {
	ranks := cellRanks(inv)
	at := make(map[int]int, len(inv.GPUs)) // NVML index -> position
	for i, g := range inv.GPUs {
		at[g.Index] = i
	}
	for k := range gs {
		if i, ok := at[gs[k].Index]; ok {
			gs[k].Ranked, gs[k].CellRank = true, ranks[i]
		}
	}
}
