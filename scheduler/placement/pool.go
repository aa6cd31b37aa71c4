package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Pool is where Nomad itself may place the allocations of a request whose
// job gpushare cannot register again: the dispatched children of a
// parameterized job (Nomad refuses every registration of a dispatched
// job). Their parent is pinned to the pool instead, and each child, which
// keeps its parent's constraints, is placed by Nomad inside it.
//
// On every node r allows (Allowed, less Avoid) with GPUs of r's models,
// the pool holds all the shares of the GPUs one allocation asks for and
// no more: for a fraction or one whole GPU the healthy GPU with the most
// free shares (ties: the lowest index), for k whole GPUs the k healthy
// whole GPUs with the most free shares. Nomad takes a request's shares
// from the pool in any order (from one device group), so on a node it can
// only take shares of that one GPU, or all of those k GPUs: every
// allocation it places is one the plugin's Reserve accepts, however many
// children run at once, and each node adds room. The pool holds nothing:
// the GPUs are not kept for the children, which wait in Nomad (a blocked
// evaluation) while their GPUs are full. Nodes whose GPUs are all busy
// are kept (the children wait there for room); only what can never hold
// one allocation (too few GPUs, a MIG instance too small, no GPU of the
// models, not enough CPU or memory on the node) is left out.
//
// It returns one placement per node, in the snapshot's node order, or a
// refusal when no node can hold one allocation.
func (s *Snapshot) Pool(r *Request, policy string) *Decision {
	d := &Decision{Request: r.ID, Policy: policy}
	if r.Shares <= 0 {
		d.Refusal = &Refusal{Code: RefusedInvalid, Message: "the request asks for no GPU shares: it needs no pool"}
		return d
	}
	for _, n := range s.nodes {
		if !r.allows(n.ID) || r.avoids(n.ID) || n.Capacity.CPU < r.Res.CPU || n.Capacity.MemoryMiB < r.Res.MemoryMiB {
			continue
		}
		var best []int // node GPU indices
		for gi := range n.groups {
			grp := &n.groups[gi]
			if !r.modelOK(grp.model) || len(grp.gpus) == 0 {
				continue
			}
			frac, whole, ok := shareSize(r.Shares, n.GPUs[grp.gpus[0]].Shares)
			k := max(whole, 1)
			if !ok || (grp.mig && whole > 0) {
				continue
			}
			var fit []int
			for _, i := range grp.gpus {
				g := &n.GPUs[i]
				if g.Down || (whole > 0 && g.inst) || (frac > 0 && g.Cap < frac) {
					continue
				}
				fit = append(fit, i)
			}
			if len(fit) < k {
				continue
			}
			slices.SortStableFunc(fit, func(a, b int) int { return cmp.Compare(n.GPUs[b].free, n.GPUs[a].free) })
			fit = fit[:k]
			if best == nil || len(fit) < len(best) || (len(fit) == len(best) && free(n, fit) > free(n, best)) {
				best = fit
			}
		}
		if best == nil {
			continue
		}
		slices.Sort(best)
		p := Placement{AllocID: r.ID + "[" + strconv.Itoa(len(d.Placements)) + "]", Node: n.ID, req: r, res: r.Res}
		var local []int
		grp := &n.groups[n.GPUs[best[0]].group]
		for _, i := range best {
			g := &n.GPUs[i]
			all := make([]int, g.Cap)
			for j := range all {
				all[j] = j
			}
			p.GPUs = append(p.GPUs, g.UUID)
			p.Shares = append(p.Shares, shareIDs(g.UUID, all)...)
			local = append(local, g.local)
		}
		p.Cell = grp.tree.Name(grp.tree.Smallest(local))
		p.Reason = fmt.Sprintf("pool for dispatched children: GPU %v of node %s (%d of its %d shares free now); Nomad places each child on it", local, n.label(), free(n, best), len(p.Shares))
		d.Placements = append(d.Placements, p)
	}
	if len(d.Placements) == 0 {
		d.Refusal = &Refusal{Code: RefusedNoCapacity, Message: fmt.Sprintf("no node the job's rules allow has GPUs of its models that can hold %d shares", r.Shares)}
	}
	return d
}

// free is the free shares of the given GPUs of n.
func free(n *Node, gpus []int) int {
	t := 0
	for _, i := range gpus {
		t += n.GPUs[i].free
	}
	return t
}
