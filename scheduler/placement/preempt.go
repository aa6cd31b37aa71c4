package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// victimsFor finds the node where one allocation of a guaranteed request
// fits by stopping the fewest opportunistic allocations (least GPU capacity
// first, then fewest allocations, then the policy's cost). It leaves the
// snapshot as it found it. Only opportunistic allocations are candidates.
// pins is as for scan: nodes a group already uses.
func (e *engine) victimsFor(s *Snapshot, r *Request, pins map[int]int, sp *spread) (*Node, []Alloc, bool) {
	type option struct {
		node    *Node
		victims []Alloc
		milli   int
		cost    [3]float64
	}
	var best *option
	if s.opportunistic == 0 {
		return nil, nil, false
	}
	for _, n := range s.nodes {
		pin := -1
		if p, used := pins[n.idx]; used {
			if p < 0 {
				continue
			}
			pin = p
		}
		var opp []*allocRec
		for _, a := range n.allocs {
			if a.Class == ClassOpportunistic {
				opp = append(opp, a)
			}
		}
		if len(opp) == 0 || r.avoids(n.ID) || (r.Allowed != nil && !e.allowed(n)) || !sp.allows(n) || !couldFree(n, r, opp) {
			continue
		}
		for _, a := range opp {
			_, _ = s.remove(a.ID)
		}
		if c := e.eval(n, r, pin); !c.ok {
			for _, a := range opp {
				_ = s.addAlloc(a.Alloc)
			}
			continue
		}
		// Give back as many as still leave room, largest first.
		slices.SortStableFunc(opp, func(a, b *allocRec) int {
			if c := cmp.Compare(b.milli, a.milli); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		o := option{node: n}
		for _, a := range opp {
			_ = s.addAlloc(a.Alloc)
			if c := e.eval(n, r, pin); !c.ok {
				_, _ = s.remove(a.ID)
				o.victims = append(o.victims, a.Alloc)
				o.milli += a.milli
			}
		}
		o.cost = e.eval(n, r, pin).cost
		for _, v := range o.victims {
			_ = s.addAlloc(v)
		}
		if best == nil || o.milli < best.milli || (o.milli == best.milli && (len(o.victims) < len(best.victims) ||
			(len(o.victims) == len(best.victims) && less(&o.cost, &best.cost)))) {
			best = &o
		}
	}
	if best == nil {
		return nil, nil, false
	}
	return best.node, best.victims, true
}

// preempt places a single allocation of a guaranteed request by stopping
// opportunistic allocations, and fills d with the placement and victims.
func (e *engine) preempt(s *Snapshot, r *Request, d *Decision) bool {
	n, victims, ok := e.victimsFor(s, r, nil, newSpread(r))
	if !ok {
		return false
	}
	for _, v := range victims {
		_, _ = s.remove(v.ID)
	}
	c := e.eval(n, r, -1)
	p := e.materialize(s, n, c, r, 0)
	for _, v := range victims {
		_ = s.addAlloc(v)
	}
	d.Preempt = victimIDs(victims)
	p.Reason += preemptNote(d.Preempt, r)
	d.Placements = []Placement{p}
	return true
}

func victimIDs(vs []Alloc) []string {
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	slices.Sort(ids)
	return ids
}

func preemptNote(ids []string, r *Request) string {
	return fmt.Sprintf("; preempts opportunistic %s to give %s its guaranteed capacity", strings.Join(ids, ", "), vcName(r.VC))
}

func vcName(vc string) string {
	if vc == "" {
		return "the shared pool"
	}
	return "virtual cluster " + vc
}

// couldFree is a quick bound: whether stopping every opportunistic
// allocation on n could make room for one allocation of r.
func couldFree(n *Node, r *Request, opp []*allocRec) bool {
	free := n.Free()
	var perGPU [64]int
	reclaim := perGPU[:0]
	if len(n.GPUs) <= len(perGPU) {
		reclaim = perGPU[:len(n.GPUs)]
	} else {
		reclaim = make([]int, len(n.GPUs))
	}
	for _, a := range opp {
		free.CPU += a.Res.CPU
		free.MemoryMiB += a.Res.MemoryMiB
		for k, gi := range a.gpus {
			reclaim[gi] += len(a.shares[k])
		}
	}
	if free.CPU < r.Res.CPU || free.MemoryMiB < r.Res.MemoryMiB {
		return false
	}
	if r.Shares == 0 {
		return true
	}
	for gi := range n.groups {
		grp := &n.groups[gi]
		if !r.modelOK(grp.model) {
			continue
		}
		whole := 0
		for _, i := range grp.gpus {
			g := &n.GPUs[i]
			if g.Down {
				continue
			}
			avail := g.free + reclaim[i]
			frac, k, ok := shareSize(r.Shares, g.Shares)
			switch {
			case !ok:
			case frac > 0 && avail >= frac:
				return true
			case avail == g.Shares && !g.MIG():
				whole++
				if whole >= max(k, 1) {
					return true
				}
			}
		}
	}
	return false
}
