package placement

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn/cells"
)

// Decide places one request. It never changes the snapshot as seen from
// outside (placements of a group are tried on the snapshot and undone).
func (e *engine) Decide(s *Snapshot, req Request) *Decision {
	e.sync(s)
	d := &Decision{Request: req.ID, Policy: e.name}
	r := &req
	if err := r.Validate(); err != nil {
		d.Refusal = &Refusal{Code: RefusedInvalid, Message: err.Error()}
		return d
	}
	e.rng = e.seedFor(s, r)
	e.allowFor(s, r)
	ref, short := e.gate(s, r)
	if ref != nil {
		d.Refusal = ref
		return d
	}
	if r.Count == 1 && !e.randomNode() && len(r.Already) == 0 {
		n, c, ok := e.best(s, r)
		if ok {
			d.Placements = []Placement{e.materialize(s, n, c, r, 0)}
			d.on, d.gen = s, s.gen
			return d
		}
	} else if e.placeGroup(s, r, d, false) || e.placeStacked(s, r, d) {
		return d
	}
	d.Placements, d.Preempt = nil, nil
	if r.guaranteed() {
		if r.Count == 1 && !e.randomNode() && e.preempt(s, r, d) {
			return d
		}
		if (r.Count > 1 || e.randomNode()) && e.placeGroup(s, r, d, true) {
			return d
		}
		d.Placements, d.Preempt = nil, nil
	}
	d.Refusal = quotaShort(e.explain(s, r), short)
	return d
}

// quotaShort is the refusal of a request whose allowed models the quota
// narrowed (short says why): what can never fit the models with quota
// left waits for the quota of the others, and any other refusal says the
// quota too.
func quotaShort(ref, short *Refusal) *Refusal {
	if short == nil {
		return ref
	}
	switch ref.Code {
	case RefusedInvalid, RefusedNoModel, RefusedTooLarge:
		return &Refusal{Code: RefusedQuota, Message: short.Message + "; the models it has quota left of can never hold it (" + ref.Message + ")"}
	}
	return &Refusal{Code: ref.Code, Message: ref.Message + "; " + short.Message}
}

// scan evaluates every node and returns the best (or, for random policies,
// a uniformly random feasible one). pins restricts nodes a group already
// uses; rack, when not empty, restricts the scan to one rack.
func (e *engine) scan(s *Snapshot, r *Request, pins map[int]int, rack *string, sp *spread) (*Node, cand, bool) {
	var bestN *Node
	var best cand
	seen, fewest := 0, 0
	for _, n := range s.nodes {
		if rack != nil && n.Rack != *rack {
			continue
		}
		pin := -1
		if p, used := pins[n.idx]; used {
			if p < 0 {
				continue // holds a whole allocation of the group already
			}
			pin = p
		}
		if !sp.allows(n) {
			continue
		}
		c := e.eval(n, r, pin)
		if !c.ok && pin >= 0 && n.staged(r) {
			// the GPU the group's fractions stack on is full: on a staged
			// node another GPU may take the next (SetStaging)
			c = e.eval(n, r, -1)
		}
		if !c.ok {
			continue
		}
		// the group's allocations spread over nodes first (Nomad's job
		// anti-affinity): a node holding fewer of them wins over any cost
		switch on := sp.on(n); {
		case bestN != nil && on > fewest:
			continue
		case bestN != nil && on < fewest:
			bestN, seen = nil, 0
			fewest = on
		case bestN == nil:
			fewest = on
		}
		if e.randomNode() {
			// uniformly among the exact fits of instances when there are any
			if bestN != nil && c.exact != best.exact {
				if !c.exact {
					continue
				}
				seen = 0
			}
			seen++
			if e.rng.IntN(seen) == 0 {
				bestN, best = n, c
			}
			continue
		}
		if bestN == nil || less(&c.cost, &best.cost) {
			bestN, best = n, c
		}
	}
	return bestN, best, bestN != nil
}

// placeGroup places Count allocations one by one, trying each on the
// snapshot and undoing them all at the end. A node holds either one
// allocation of the group or fractions stacked on one GPU
// (docs/gate-and-pin.md, "Several allocations"), but for a node whose
// GPUs are device groups of their own (pergpu.go) or that the service
// stages (SetStaging: several whole-GPU allocations, fractions on another
// GPU once the first is full). Groups of more than one allocation prefer
// one rack.
//
// With preempt, an allocation that fits nowhere may stop opportunistic
// allocations (the victims are listed in d.Preempt).
func (e *engine) placeGroup(s *Snapshot, r *Request, d *Decision, preempt bool) bool {
	var added []string
	var stopped []Alloc
	defer func() {
		for i := len(added) - 1; i >= 0; i-- {
			_, _ = s.remove(added[i])
		}
		for _, v := range stopped {
			_ = s.addAlloc(v)
		}
	}()
	var rack *string
	if r.Count > 1 {
		rack = e.chooseRack(s, r)
	}
	pins := map[int]int{}
	sp := newSpread(r)
	for i := 0; i < r.Count; i++ {
		n, c, ok := e.scan(s, r, pins, rack, sp)
		if !ok && rack != nil {
			rack = nil
			n, c, ok = e.scan(s, r, pins, nil, sp)
		}
		var victims []Alloc
		if !ok && preempt {
			n, victims, ok = e.victimsFor(s, r, pins, sp)
			if ok {
				for _, v := range victims {
					_, _ = s.remove(v.ID)
				}
				stopped = append(stopped, victims...)
				c = e.eval(n, r, pins0(pins, n.idx))
				ok = c.ok
			}
		}
		if !ok {
			return false
		}
		p := e.materialize(s, n, c, r, i)
		if len(victims) > 0 {
			p.Reason += preemptNote(victimIDs(victims), r)
		}
		if rack != nil && *rack != "" {
			p.Reason += "; group kept in rack " + *rack
		}
		if err := s.addAlloc(p.alloc()); err != nil {
			return false
		}
		added = append(added, p.AllocID)
		d.Placements = append(d.Placements, p)
		sp.take(n)
		switch {
		case r.DistinctNodes: // one allocation per node (distinct_hosts)
			pins[n.idx] = -1
		case r.Shares == 0: // CPU-only allocations pin no shares
		case n.groups[c.group].perGPU: // Nomad places each on one GPU's group
		case c.gpu >= 0:
			pins[n.idx] = c.gpu
		case n.staged(r): // whole GPUs the service places one after the other (SetStaging)
		default:
			pins[n.idx] = -1
		}
	}
	if len(stopped) > 0 {
		d.Preempt = victimIDs(stopped)
	}
	return true
}

// placeStacked places every allocation of a fractional group on one GPU,
// the one the policy picks for the group's shares taken together: when
// placeGroup, allocation by allocation, fills the GPU it pinned on each
// node before the last allocation is placed, a GPU that holds the whole
// group still takes it (the group spreads over nodes only by preference,
// as Nomad's job anti-affinity does).
func (e *engine) placeStacked(s *Snapshot, r *Request, d *Decision) bool {
	d.Placements, d.Preempt = nil, nil
	if r.Count < 2 || r.Shares == 0 || r.DistinctNodes || len(r.Limits) > 0 || e.rounds() {
		return false
	}
	all := *r
	all.Count, all.Shares = 1, r.Shares*r.Count
	all.Res = Resources{CPU: r.Res.CPU * int64(r.Count), MemoryMiB: r.Res.MemoryMiB * int64(r.Count)}
	n, c, ok := e.scan(s, &all, nil, nil, nil)
	if !ok || c.gpu < 0 || n.groups[c.group].perGPU {
		return false // more than one GPU's worth, or a node Nomad places per GPU
	}
	gpu := c.gpu
	var added []string
	defer func() {
		for i := len(added) - 1; i >= 0; i-- {
			_, _ = s.remove(added[i])
		}
	}()
	for i := 0; i < r.Count; i++ {
		c := e.eval(n, r, gpu)
		if !c.ok {
			d.Placements = nil
			return false
		}
		p := e.materialize(s, n, c, r, i)
		if err := s.addAlloc(p.alloc()); err != nil {
			d.Placements = nil
			return false
		}
		added = append(added, p.AllocID)
		d.Placements = append(d.Placements, p)
	}
	return true
}

// pins0 is the GPU a group pinned on node idx, or -1.
func pins0(pins map[int]int, idx int) int {
	if p, ok := pins[idx]; ok {
		return p
	}
	return -1
}

// chooseRack returns the rack whose nodes can each take one allocation of
// the group, enough for all of it, with the lowest total cost of the best
// Count nodes; nil when no single rack can.
func (e *engine) chooseRack(s *Snapshot, r *Request) *string {
	type rackInfo struct {
		costs []float64
	}
	racks := map[string]*rackInfo{}
	var names []string
	for _, n := range s.nodes {
		c := e.eval(n, r, -1)
		if !c.ok {
			continue
		}
		ri := racks[n.Rack]
		if ri == nil {
			ri = &rackInfo{}
			racks[n.Rack] = ri
			names = append(names, n.Rack)
		}
		ri.costs = append(ri.costs, c.cost[0]*1e6+c.cost[1]*1e3+c.cost[2])
	}
	var best *string
	bestCost := 0.0
	for _, name := range names {
		ri := racks[name]
		if len(ri.costs) < r.Count {
			continue
		}
		slices.Sort(ri.costs)
		sum := 0.0
		for _, v := range ri.costs[:r.Count] {
			sum += v
		}
		if best == nil || sum < bestCost {
			nm := name
			best, bestCost = &nm, sum
		}
	}
	if len(names) <= 1 {
		return nil
	}
	return best
}

// materialize turns a node's candidate into a placement with share IDs,
// cell and reason.
func (e *engine) materialize(s *Snapshot, n *Node, c cand, r *Request, i int) Placement {
	p := Placement{AllocID: r.ID + "[" + strconv.Itoa(i) + "]", Node: n.ID, Score: c.score(), Predicted: c.pred, PredictedMate: c.mate,
		PredictedErr: c.predUnc, PredictedMateErr: c.mateUnc, req: r, res: n.need(r)}
	if c.group < 0 {
		p.Cell = "none"
		p.Reason = fmt.Sprintf("cpu-only on node %s (%s)", n.label(), e.name)
		return p
	}
	grp := &n.groups[c.group]
	var local []int
	if c.gpu >= 0 {
		g := &n.GPUs[c.gpu]
		take := c.take
		if e.rounds() {
			take = g.Shares
		}
		idx := g.lowestFree(take)
		if e.kind == kNomad {
			idx = e.randomShares(g, take)
		}
		p.GPUs = []string{g.UUID}
		p.Shares = shareIDs(g.UUID, idx)
		p.at = placed(n, c.gpu, idx, p.Shares)
		local = []int{g.local}
	} else {
		for m := c.mask; m != 0; m &= m - 1 {
			li := bits.TrailingZeros64(m)
			g := &n.GPUs[grp.gpus[li]]
			local = append(local, li)
			p.GPUs = append(p.GPUs, g.UUID)
			p.Shares = append(p.Shares, shareIDs(g.UUID, g.lowestFree(g.Shares))...)
		}
	}
	if len(local) == 1 {
		p.Cell = grp.tree.CellName(local[0])
	} else {
		p.Cell = grp.tree.Name(grp.tree.Smallest(local))
	}
	// the reason is written into one buffer: a pass writes one for each
	// of thousands of placements, and fmt's formatting of each part was
	// a tenth of the step at 10,000 nodes
	why := make([]byte, 0, 160)
	switch {
	case c.gpu >= 0 && n.GPUs[c.gpu].MIG():
		why = append(why, migReason(&n.GPUs[c.gpu], c, local[0], n.label())...)
	case c.gpu >= 0 && !e.rounds():
		why = strconv.AppendInt(why, int64(c.take), 10)
		why = append(why, " shares of GPU "...)
		why = strconv.AppendInt(why, int64(local[0]), 10)
		why = append(why, " on node "...)
		why = append(why, n.label()...)
	case c.gpu >= 0:
		why = fmt.Appendf(why, "whole GPU %d for %d shares (%s does not share GPUs) on node %s", local[0], r.Shares, e.name, n.label())
	default:
		why = fmt.Appendf(why, "%d GPUs %s in %s on node %s, worst link %s", len(local), cells.FormatGPUs(local), p.Cell, n.label(), cells.Worst(grp.links, local))
	}
	if e.kind == kGpushare || e.kind == kFGD {
		why = append(why, "; fragmentation "...)
		why = appendFixed2(why, c.dfrag, true)
		why = append(why, " GPU"...)
	}
	if e.kind == kGpushare && c.gpu >= 0 {
		why = append(why, "; "...)
		why = e.appendPairingNote(why, &n.GPUs[c.gpu], r, c.pred)
	}
	p.Reason = string(why)
	return p
}

// appendFixed2 appends v as fmt's %.2f does, or %+.2f with plus
// (TestAppendFixed2IsFmts).
func appendFixed2(b []byte, v float64, plus bool) []byte {
	num := strconv.AppendFloat(nil, v, 'f', 2, 64)
	switch {
	case plus && num[0] != '-' && num[0] != '+':
		b = append(b, '+')
	case !plus && num[0] == '+' && !math.IsInf(v, 0):
		num = num[1:]
	}
	return append(b, num...)
}

// appendPairingNote appends what sharing g means for r: who it shares the
// GPU with and r's predicted throughput there.
func (e *engine) appendPairingNote(b []byte, g *GPU, r *Request, pred float64) []byte {
	if r.Timeslice {
		b = append(b, "time-sliced, "...)
	}
	if len(g.allocs) == 0 {
		return append(b, "alone on its GPU"...)
	}
	names := make([]string, 0, len(g.allocs))
	for _, a := range g.allocs {
		if r.Timeslice {
			names = append(names, a.ID)
		} else {
			names = append(names, a.ID+" ("+a.Profile.String()+")")
		}
	}
	slices.Sort(names) // the order of g.allocs is not part of the state
	if r.Timeslice {
		b = append(b, "takes turns on its GPU with "...)
		for i, name := range names {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, name...)
		}
		return append(b, " (one quantum each)"...)
	}
	b = append(b, "shares its GPU with "...)
	for i, name := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, name...)
	}
	b = append(b, ": predicted "...)
	b = appendFixed2(b, pred, false)
	b = append(b, "x of alone for "...)
	b = append(b, r.ID...)
	b = append(b, " ("...)
	b = append(b, r.Profile.String()...)
	return append(b, ')')
}

func (e *engine) randomShares(g *GPU, take int) []int {
	var free []int
	for k := 0; k < g.Shares; k++ {
		if !g.isUsed(k) {
			free = append(free, k)
		}
	}
	e.rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	out := free[:take]
	slices.Sort(out)
	return out
}
