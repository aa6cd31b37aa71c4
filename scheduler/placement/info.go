package placement

import (
	"fmt"
	"math/bits"
)

// SetHealth marks a GPU healthy or not (the plugin marks all shares of a
// lost GPU unhealthy). Nothing new is placed on an unhealthy GPU; the
// allocations already there stay until the driver removes them.
func (s *Snapshot) SetHealth(uuid string, healthy bool) error {
	ref, ok := s.byUUID[uuid]
	if !ok {
		return fmt.Errorf("GPU %q: %w", uuid, ErrUnknown)
	}
	g := &ref.node.GPUs[ref.gpu]
	if g.Down != !healthy {
		g.Down = !healthy
		s.gen++
		s.touch(ref.node)
	}
	return nil
}

// CellInfo describes one topology cell of a node, for status pages and
// reasons.
type CellInfo struct {
	Name  string   `json:"name"`
	Model string   `json:"model"`
	GPUs  []string `json:"gpus"`
	// Depth is 0 for the node cell.
	Depth int `json:"depth"`
	// FreeGPUs counts the cell's healthy GPUs with every share free.
	FreeGPUs int `json:"free_gpus"`
}

// Cells lists the node's cells, per model, parents before children.
func (n *Node) Cells() []CellInfo {
	var out []CellInfo
	for gi := range n.groups {
		grp := &n.groups[gi]
		if grp.mig {
			continue // instances are no cell's: they never hold whole GPUs
		}
		var order []int
		var walk func(c int)
		walk = func(c int) {
			order = append(order, c)
			for _, ch := range grp.tree.Cells[c].Children {
				walk(ch)
			}
		}
		if grp.tree.Root >= 0 {
			walk(grp.tree.Root)
		}
		for _, c := range order {
			cell := &grp.tree.Cells[c]
			info := CellInfo{Name: grp.tree.Name(c), Model: grp.model, Depth: cell.Depth}
			for m := grp.masks[c]; m != 0; m &= m - 1 {
				g := &n.GPUs[grp.gpus[bits.TrailingZeros64(m)]]
				info.GPUs = append(info.GPUs, g.UUID)
				if g.Whole() && !g.Down {
					info.FreeGPUs++
				}
			}
			out = append(out, info)
		}
	}
	return out
}

// Usage sums the cluster's GPU capacity and use.
type Usage struct {
	// GPUs counts shared MIG instances as GPUs.
	Nodes, GPUs int
	// Shares and FreeShares over all GPUs: a MIG instance's offered
	// shares, in shares of its parent.
	Shares, FreeShares int
	// AllocatedGPUs is the allocated share of each GPU summed, in GPUs
	// (of the parent, for a MIG instance).
	AllocatedGPUs float64
	// WholeFreeGPUs counts GPUs with every share free.
	WholeFreeGPUs int
	CPU, FreeCPU  int64
	Allocs        int
}

// Usage returns the cluster's totals.
func (s *Snapshot) Usage() Usage {
	u := Usage{Nodes: len(s.nodes), Allocs: len(s.allocs)}
	for _, n := range s.nodes {
		u.CPU += n.Capacity.CPU
		u.FreeCPU += n.Free().CPU
		for i := range n.GPUs {
			g := &n.GPUs[i]
			u.GPUs++
			u.Shares += g.Cap
			u.FreeShares += g.free
			u.AllocatedGPUs += float64(g.Cap-g.free) / float64(g.Shares)
			if g.Whole() {
				u.WholeFreeGPUs++
			}
		}
	}
	return u
}
