package placement

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn/cells"
)

// NomadPicksGPU re-chooses the GPUs of a decision of one allocation as
// Nomad's device allocator would if each GPU were a device group of its
// own and the pin named only the node (docs/device-contract.md, "One
// group per GPU"). A fraction or one whole GPU: uniformly among the
// node's healthy GPUs of the same model with room for it (Nomad walks its
// device groups in Go's map order), taking their lowest free shares.
// Several whole GPUs on a node whose plugin composes them (MultiGPU; one
// device block of one GPU's shares per GPU): each block in turn uniformly
// among the group's wholly free GPUs not yet taken. A decision of several
// allocations, on a shared MIG instance, or of several GPUs elsewhere is
// left as it is. The simulator uses it to measure what leaving the GPU to
// Nomad costs; the service never does.
func (s *Snapshot) NomadPicksGPU(d *Decision, rng *rand.Rand) {
	s.nomadPicks(d, "a wholly free GPU at random", func(_ *Node, fits []int) int { return fits[rng.IntN(len(fits))] })
}

// NomadPicksFirstGPU is NomadPicksGPU where every request carries a node
// pin's fixed device affinities, which rank a node's GPUs: Nomad then
// takes the first GPU with room in that order, deterministically, and for
// an allocation of k whole GPUs (k device blocks) the first k wholly free
// GPUs of the node. The order (nomadOrder) is the node's cell order where
// the group carries the cell-rank affinities (the decision's request
// without NomadIndexOrder) and the node's plugin fingerprints ranks, else
// index order: under the index affinities of older pins, and on a node
// of an older plugin, where the rank affinities match no GPU and the
// index tie-break beside them decides (pin.RankAffinities).
func (s *Snapshot) NomadPicksFirstGPU(d *Decision) {
	byIndex := len(d.Placements) == 1 && d.Placements[0].req != nil && d.Placements[0].req.NomadIndexOrder
	how := "the first wholly free GPU in the node's cell order"
	if byIndex {
		how = "the lowest-indexed wholly free GPU"
	}
	s.nomadPicks(d, how, func(n *Node, fits []int) int {
		best := fits[0]
		for _, i := range fits[1:] {
			if nomadRank(n, i, byIndex) < nomadRank(n, best, byIndex) {
				best = i
			}
		}
		return best
	})
}

// nomadRank is where node GPU i comes in the order Nomad takes a node's
// GPUs under a node pin's affinities (lower first; ties are not possible
// within a group): its cell rank where its group has ranks and byIndex is
// off, else its index in the group. A node's per-GPU groups of one model
// form one placement group, whose GPUs the ranks order as on the node.
func nomadRank(n *Node, i int, byIndex bool) int {
	g := &n.GPUs[i]
	if grp := &n.groups[g.group]; !byIndex && grp.rank != nil {
		return grp.rank[g.local]
	}
	return g.local
}

// nomadPicks re-chooses d's GPUs, pick choosing one of the node GPUs
// (indices into n.GPUs) that fit a device block (each), how saying how
// for several.
func (s *Snapshot) nomadPicks(d *Decision, how string, pick func(n *Node, fits []int) int) {
	if !d.Placed() || len(d.Placements) != 1 || len(d.Placements[0].GPUs) == 0 {
		return
	}
	p := &d.Placements[0]
	ref, ok := s.byUUID[p.GPUs[0]]
	if !ok {
		return
	}
	n, chosen := ref.node, &ref.node.GPUs[ref.gpu]
	if chosen.inst {
		return
	}
	if len(p.GPUs) > 1 {
		nomadPicksWhole(p, n, chosen.group, how, pick)
		return
	}
	take := len(p.Shares)
	var fits []int
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Model == chosen.Model && !g.Down && !g.inst && g.Shares == chosen.Shares && g.free >= take {
			fits = append(fits, i)
		}
	}
	if len(fits) < 2 {
		return
	}
	g := &n.GPUs[pick(n, fits)]
	p.GPUs = []string{g.UUID}
	p.Shares = shareIDs(g.UUID, g.lowestFree(take))
	p.Cell = ""
	p.Reason += "; GPU " + g.UUID + " chosen by Nomad among " + strconv.Itoa(len(fits))
}

// nomadPicksWhole re-chooses the whole GPUs of placement p on n, all of
// group gi, when the group's plugin composes them (multiGPU): the
// allocation is asked as one device block of one GPU's shares per GPU,
// and Nomad places the blocks one after the other, each on a wholly free
// GPU of the node not yet taken (the core allows several only where the
// request may take GPUs of one model there: pergpu.go).
func nomadPicksWhole(p *Placement, n *Node, gi int, how string, pick func(n *Node, fits []int) int) {
	grp := &n.groups[gi]
	if !grp.perGPU || !grp.multiGPU || (p.req != nil && n.modelsFor(p.req) > 1) {
		return
	}
	var fits []int // node GPU indices, in NVML index order
	for _, i := range grp.gpus {
		if g := &n.GPUs[i]; !g.Down && g.Whole() {
			fits = append(fits, i)
		}
	}
	k := len(p.GPUs)
	if len(fits) < k {
		return
	}
	local := make([]int, 0, k)
	for range k {
		i := pick(n, fits)
		local = append(local, n.GPUs[i].local)
		fits = slices.DeleteFunc(fits, func(x int) bool { return x == i })
	}
	slices.Sort(local)
	p.GPUs, p.Shares = make([]string, 0, k), make([]string, 0, len(p.Shares))
	for _, li := range local {
		g := &n.GPUs[grp.gpus[li]]
		p.GPUs = append(p.GPUs, g.UUID)
		p.Shares = append(p.Shares, shareIDs(g.UUID, g.lowestFree(g.Shares))...)
	}
	p.Cell = grp.tree.Name(grp.tree.Smallest(local))
	p.Reason += fmt.Sprintf("; GPUs %s chosen by Nomad (one device block per GPU, each on %s), in %s, worst link %s",
		cells.FormatGPUs(local), how, p.Cell, cells.Worst(grp.links, local))
}

// NomadChoosesGPU reports whether Nomad alone keeps each of d's
// allocations on the GPUs the scheduler models when the pin names only
// their nodes: every placement holds GPUs its plugin offers each as a
// device group of its own (device_groups = "gpu"), not a shared MIG
// instance (whose group holds several), and no time-sliced allocation
// (Nomad's pick would not keep it off GPUs of other kinds); one GPU, or
// several whole GPUs of a group whose plugin composes them (MultiGPU)
// where the request may take GPUs of one model only (Nomad takes the
// lowest-indexed wholly free ones: NomadPicksFirstGPU). Such a decision
// may be pinned by node alone (pin.ContractNode), a pin Nomad checks in
// place.
func (s *Snapshot) NomadChoosesGPU(d *Decision) bool {
	if !d.Placed() {
		return false
	}
	for _, p := range d.Placements {
		if p.req != nil && p.req.Timeslice {
			return false // Nomad's pick would not keep time-sliced jobs apart
		}
		group := -1
		for _, u := range p.GPUs {
			ref, ok := s.byUUID[u]
			if !ok {
				return false
			}
			g := &ref.node.GPUs[ref.gpu]
			grp := &ref.node.groups[g.group]
			if g.inst || !grp.perGPU {
				return false
			}
			if len(p.GPUs) > 1 && (!grp.multiGPU || (group >= 0 && g.group != group) || (p.req != nil && ref.node.modelsFor(p.req) > 1)) {
				return false // Nomad would not compose them, or could mix models
			}
			group = g.group
		}
	}
	return true
}

// nomadsPick reports whether k whole GPUs of group grp for r are scored
// as Nomad will take them (Request.NomadPicksFirst): several whole GPUs
// of a group whose plugin composes them, not time-sliced (whose
// decisions Nomad does not keep: NomadChoosesGPU). Such a group holds k
// > 1 GPUs of one allocation only where r may take GPUs of one model on
// the node (wholeCap), where NomadChoosesGPU keeps the decision.
func nomadsPick(grp *gpuGroup, r *Request, k int) bool {
	return r.NomadPicksFirst && k > 1 && grp.multiGPU && !r.Timeslice
}

// nomadsCell is chooseBuddy's answer when Nomad picks the GPUs: the
// first k of the group's wholly free GPUs (free, group-local) in the
// order Nomad takes them (nomadRank: cell order, or index order for a
// group of index affinities or a group without ranks), as
// NomadPicksFirstGPU re-chooses them, with their worst link and the free
// GPUs they cut off from whole free cells, so the node is ranked by the
// cell Nomad's pick forms.
func nomadsCell(grp *gpuGroup, free uint64, k int, byIndex bool) buddyRes {
	if bits.OnesCount64(free) < k {
		return buddyRes{}
	}
	mask := lowestBits(free, k)
	if !byIndex && grp.byRank != nil {
		mask = 0
		for _, li := range grp.byRank {
			if bits.OnesCount64(mask) == k {
				break
			}
			mask |= free & (1 << li)
		}
	}
	pick := make([]int, 0, k)
	for m := mask; m != 0; m &= m - 1 {
		pick = append(pick, bits.TrailingZeros64(m))
	}
	return buddyRes{ok: true, mask: mask, worst: cells.Worst(grp.links, pick), waste: buddyWaste(grp, free, mask, k)}
}
