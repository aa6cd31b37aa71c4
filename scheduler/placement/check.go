package placement

import (
	"fmt"
	"slices"
)

// Check verifies the snapshot's invariants and returns the first violation:
// no share is held twice, free counts match the shares held, no node's CPU,
// memory or shares exceed its capacity, and every allocation holds either a
// fraction of one GPU or whole GPUs.
func (s *Snapshot) Check() error {
	for _, n := range s.nodes {
		held := make([][]bool, len(n.GPUs))
		for i := range n.GPUs {
			held[i] = make([]bool, n.GPUs[i].Shares)
		}
		var used Resources
		for _, a := range n.allocs {
			if s.allocs[a.ID] != a {
				return fmt.Errorf("node %s lists allocation %s that the snapshot does not", n.ID, a.ID)
			}
			used.CPU += a.Res.CPU
			used.MemoryMiB += a.Res.MemoryMiB
			whole := 0
			for k, gi := range a.gpus {
				g := &n.GPUs[gi]
				for _, idx := range a.shares[k] {
					if held[gi][idx] {
						return fmt.Errorf("share %s:%d is held twice (again by %s)", g.UUID, idx, a.ID)
					}
					held[gi][idx] = true
				}
				if len(a.shares[k]) == g.Shares && !g.MIG() {
					whole++
				}
				if !slices.Contains(g.allocs, a) {
					return fmt.Errorf("GPU %s does not list allocation %s", g.UUID, a.ID)
				}
			}
			if len(a.gpus) > 1 && whole != len(a.gpus) {
				return fmt.Errorf("allocation %s holds a fraction spread over %d GPUs", a.ID, len(a.gpus))
			}
			if len(a.gpus) == 1 && n.GPUs[a.gpus[0]].MIG() && len(a.shares[0]) >= n.GPUs[a.gpus[0]].Shares {
				return fmt.Errorf("allocation %s holds a whole GPU's shares of MIG instance %s", a.ID, n.GPUs[a.gpus[0]].UUID)
			}
		}
		if used != n.used {
			return fmt.Errorf("node %s accounts %+v used but its allocations use %+v", n.ID, n.used, used)
		}
		if used.CPU > n.Capacity.CPU || used.MemoryMiB > n.Capacity.MemoryMiB || used.CPU < 0 || used.MemoryMiB < 0 {
			return fmt.Errorf("node %s uses %+v of %+v", n.ID, used, n.Capacity)
		}
		for i := range n.GPUs {
			g := &n.GPUs[i]
			cnt := 0
			for k, h := range held[i] {
				if k >= g.Cap && (h || !g.isUsed(k)) {
					return fmt.Errorf("GPU %s offers %d shares, but share %d is held (%v) or free (%v)", g.UUID, g.Cap, k, h, !g.isUsed(k))
				}
				if k >= g.Cap {
					continue
				}
				if h != g.isUsed(k) {
					return fmt.Errorf("GPU %s share %d: bitmap says %v, allocations say %v", g.UUID, k, g.isUsed(k), h)
				}
				if h {
					cnt++
				}
			}
			if g.free != g.Cap-cnt || g.free < 0 || g.Cap > g.Shares || (g.Cap != g.Shares && !g.MIG()) {
				return fmt.Errorf("GPU %s counts %d free shares but %d of %d are held", g.UUID, g.free, cnt, g.Cap)
			}
		}
	}
	for id, a := range s.allocs {
		if !slices.Contains(a.node.allocs, a) {
			return fmt.Errorf("allocation %s is not listed on node %s", id, a.node.ID)
		}
	}
	return nil
}

// Empty reports whether no allocation holds anything.
func (s *Snapshot) Empty() bool {
	for _, n := range s.nodes {
		if n.used != (Resources{}) || len(n.allocs) > 0 {
			return false
		}
		for i := range n.GPUs {
			if !n.GPUs[i].Idle() {
				return false
			}
		}
	}
	return len(s.allocs) == 0
}
