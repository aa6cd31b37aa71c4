package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// preempt finds the node where a guaranteed request fits by stopping the
// fewest opportunistic allocations (least GPU capacity first, then fewest
// allocations, then the policy's cost), and fills d with the placement and
// the victims. Only opportunistic allocations are ever preempted.
func (e *engine) preempt(s *Snapshot, r *Request, d *Decision) bool {
	type option struct {
		node    *Node
		victims []*allocRec
		milli   int
		cost    [3]float64
	}
	var best *option
	for _, n := range s.nodes {
		var opp []*allocRec
		for _, a := range n.allocs {
			if a.Class == ClassOpportunistic {
				opp = append(opp, a)
			}
		}
		if len(opp) == 0 || r.avoids(n.ID) {
			continue
		}
		for _, a := range opp {
			_, _ = s.remove(a.ID)
		}
		if c := e.eval(n, r, -1); !c.ok {
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
		var victims []*allocRec
		for _, a := range opp {
			_ = s.addAlloc(a.Alloc)
			if c := e.eval(n, r, -1); !c.ok {
				_, _ = s.remove(a.ID)
				victims = append(victims, a)
			}
		}
		c := e.eval(n, r, -1)
		o := option{node: n, victims: victims, cost: c.cost}
		for _, v := range victims {
			o.milli += v.milli
		}
		for _, v := range victims {
			_ = s.addAlloc(v.Alloc)
		}
		if best == nil || o.milli < best.milli || (o.milli == best.milli && (len(o.victims) < len(best.victims) ||
			(len(o.victims) == len(best.victims) && less(&o.cost, &best.cost)))) {
			best = &o
		}
	}
	if best == nil {
		return false
	}
	for _, v := range best.victims {
		_, _ = s.remove(v.ID)
	}
	c := e.eval(best.node, r, -1)
	p := e.materialize(s, best.node, c, r, 0)
	var ids []string
	for _, v := range best.victims {
		ids = append(ids, v.ID)
		_ = s.addAlloc(v.Alloc)
	}
	slices.Sort(ids)
	p.Reason += fmt.Sprintf("; preempts opportunistic %s to give %s its guaranteed capacity", strings.Join(ids, ", "), vcName(r.VC))
	d.Placements = []Placement{p}
	d.Preempt = ids
	return true
}

func vcName(vc string) string {
	if vc == "" {
		return "the shared pool"
	}
	return "virtual cluster " + vc
}
