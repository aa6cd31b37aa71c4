package placement

import (
	"math"
	"math/bits"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
	"github.com/gpushare/gpushare/scheduler/interference"
)

// Why a node could not take a request; used to explain refusals.
const (
	whyOK uint8 = iota
	whyAvoid
	whyRules // not among the nodes the request allows
	whyModel
	whySize
	whyGPU
	whyTimeslice // shares free, but on GPUs time-slicing keeps it off
	whyInterference
	whyCPU // the GPUs fit; the CPU or memory does not
)

// cand is a node's best way to hold one allocation of a request.
type cand struct {
	ok    bool
	exact bool // fills a shared MIG instance exactly (exactFitTier)
	why   uint8
	cost  [3]float64
	group int    // group of the GPUs (-1 when CPU-only)
	gpu   int    // node GPU index for a fraction, else -1
	mask  uint64 // group-local GPUs for whole GPUs
	take  int    // shares per GPU taken (fraction) or 0 for whole GPUs
	pred  float64
	mate  float64 // lowest predicted throughput of the jobs already on the GPU
	// predUnc and mateUnc are the uncertainties of pred and mate
	predUnc, mateUnc float64
	dfrag            float64
	worst            devicefn.Link
}

func less(a, b *[3]float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// eval scores node n for one allocation of r. pin >= 0 restricts a fraction
// to that GPU (count > 1 groups stacking on one GPU).
func (e *engine) eval(n *Node, r *Request, pin int) cand {
	best := cand{why: whyModel, group: -1, gpu: -1}
	if r.avoids(n.ID) {
		best.why = whyAvoid
		return best
	}
	if r.Allowed != nil && !e.allowed(n) {
		best.why = whyRules
		return best
	}
	free, need := n.Free(), n.need(r)
	cpuOK := free.CPU >= need.CPU && free.MemoryMiB >= need.MemoryMiB
	if r.Shares == 0 {
		if !cpuOK {
			best.why = whyCPU
			return best
		}
		c := cand{ok: true, group: -1, gpu: -1, pred: 1, mate: 1}
		switch e.kind {
		case kBestFit:
			c.cost[0] = -bestFitScore(e.bestFit(n, r, 0))
		case kFGD, kGpushare:
			// fragmentation is counted in shares: express it in GPUs
			spg := 100
			if len(n.GPUs) > 0 {
				spg = n.GPUs[0].Shares
			}
			c.dfrag = e.f.delta(n, nil, r.Res) / float64(spg)
			c.cost[0] = -fgdScore(c.dfrag)
		}
		return c
	}
	for gi := range n.groups {
		grp := &n.groups[gi]
		if !r.modelOK(grp.model) {
			continue
		}
		if best.why == whyModel {
			best.why = whySize
		}
		spg := n.GPUs[grp.gpus[0]].Shares
		frac, whole, ok := shareSize(r.Shares, spg)
		if !ok || whole > n.maxWhole(gi, r) {
			continue
		}
		if frac > 0 && e.rounds() {
			frac, whole = 0, 1
		}
		if grp.mig && (whole > 0 || frac > grp.cap) {
			continue // instances hold fractions of their size only
		}
		var c cand
		if frac > 0 {
			c = e.evalFraction(n, r, gi, frac, pin)
		} else {
			c = e.evalWhole(n, r, gi, whole)
		}
		if c.ok && !cpuOK { // the GPUs are there, the CPU or memory is not
			c = cand{why: whyCPU, group: -1, gpu: -1}
		}
		if c.ok && (!best.ok || less(&c.cost, &best.cost)) {
			best = c
		} else if !c.ok && !best.ok && c.why > best.why {
			best.why = c.why
		}
	}
	return best
}

func (e *engine) evalFraction(n *Node, r *Request, gi, frac, pin int) cand {
	grp := &n.groups[gi]
	best := cand{why: whyGPU, group: gi, gpu: -1}
	seen := 0
	idle := 0.0
	if n.gpusIdle() {
		idle = 1
	}
	// GPUs without profiled jobs that have the same free shares cost the
	// same, and the first of them wins ties: score only the first.
	var neutral [8]int
	nNeutral := 0
	for _, i := range grp.gpus {
		g := &n.GPUs[i]
		if g.free < frac || g.Down || (pin >= 0 && i != pin) {
			continue
		}
		if !e.timesliceRoom(g, r) {
			if best.why < whyTimeslice {
				best.why = whyTimeslice
			}
			continue
		}
		if (e.kind == kFGD || e.kind == kGpushare) && neutralGPU(g) {
			dup := false
			for _, f := range neutral[:nNeutral] {
				dup = dup || f == g.free
			}
			if dup {
				continue
			}
			if nNeutral < len(neutral) {
				neutral[nNeutral] = g.free
				nNeutral++
			}
		}
		c := cand{ok: true, group: gi, gpu: i, take: frac, pred: 1, mate: 1}
		switch e.kind {
		case kFirstFit:
			c.cost = [3]float64{float64(n.idx), float64(i)}
		case kBestFit:
			c.cost = [3]float64{-bestFitScore(e.bestFit(n, r, frac)), float64(g.free), float64(i)}
		case kPacking:
			c.cost = [3]float64{-e.packing(n, frac), float64(g.free), float64(i)}
		case kFGD:
			c.dfrag = e.f.delta(n, []change{{i, g.free, g.free - frac}}, r.Res) / float64(g.Shares)
			// equal scores across nodes are broken by node order only, as
			// in FGD; inside a node the first GPU wins (strict less below)
			c.cost = [3]float64{-fgdScore(c.dfrag)}
		case kRandom:
			// uniformly among the exact fits when there are any
			if ex := exactFit(g, frac); best.ok && ex != best.exact {
				if !ex {
					continue
				}
				seen = 0
			}
			seen++
			if e.rng.IntN(seen) != 0 {
				continue
			}
		case kGpushare:
			pred, mate, loss, ok := e.interfere(g, r)
			if !ok {
				if best.why < whyInterference {
					best.why = whyInterference
				}
				continue
			}
			c.pred, c.mate = pred.v, mate.v
			c.predUnc, c.mateUnc = pred.unc, mate.unc
			c.dfrag = e.f.delta(n, []change{{i, g.free, g.free - frac}}, r.Res) / float64(g.Shares)
			// equal scores: a node already in use before an idle one, which
			// stays whole for larger requests; then node order, as in FGD
			c.cost = [3]float64{-fgdScore(c.dfrag + loss), loss, idle}
		}
		if grp.mig && exactFit(g, frac) {
			c.markExact()
		}
		if !best.ok || e.kind == kRandom || less(&c.cost, &best.cost) {
			best = c
		}
		if e.kind == kFirstFit && (!grp.mig || best.exact) {
			break // first fit, but an exact fit of an instance first
		}
	}
	return best
}

// neutralGPU reports whether no job on g has an interference profile.
func neutralGPU(g *GPU) bool {
	for _, a := range g.allocs {
		if a.Profile.Known() || a.Class == ClassProduction {
			return false
		}
	}
	return true
}

// estimate is a predicted normalised throughput and its uncertainty.
type estimate struct{ v, unc float64 }

// interfere predicts the new job's normalised throughput on g, the lowest
// of the jobs already there with it (mate), each with its uncertainty, and
// the loss of total normalised throughput the pairing causes; ok is false
// when a production job's predicted slowdown plus the prediction's
// uncertainty (the prediction alone under Options.BoundOnPrediction) would
// exceed its bound, or when the new job was seen to break a bound with a
// job on g on this GPU model.
func (e *engine) interfere(g *GPU, r *Request) (pred, mate estimate, loss float64, ok bool) {
	if len(g.allocs) == 0 || r.Timeslice {
		// time-sliced jobs take turns: none runs beside another
		return estimate{v: 1}, estimate{v: 1}, 0, true
	}
	k := len(g.allocs)
	profs, out, unc := e.pair.profs[:], e.pair.out[:], e.pair.unc[:]
	if k+1 > len(profs) {
		profs, out, unc = make([]interference.Profile, k+1), make([]float64, k+1), make([]float64, k+1)
	}
	p := e.opts.Predictor
	for j, a := range g.allocs {
		profs[j] = a.Profile
		if p.Incompatible(g.Model, r.Profile, a.Profile) {
			return estimate{}, estimate{}, 0, false
		}
	}
	p.PredictOn(g.Model, profs[:k], out[:k], unc[:k])
	before := 0.0
	for _, v := range out[:k] {
		before += v
	}
	profs[k] = r.Profile
	p.PredictOn(g.Model, profs[:k+1], out[:k+1], unc[:k+1])
	after := 0.0
	for _, v := range out[:k+1] {
		after += v
	}
	pred = estimate{out[k], unc[k]}
	if r.Class == ClassProduction && e.breaks(pred, r.MaxSlowdown) {
		return pred, estimate{}, 0, false
	}
	mate = estimate{v: 1}
	for j, a := range g.allocs {
		if out[j] < mate.v {
			mate = estimate{out[j], unc[j]}
		}
		if a.Class == ClassProduction && e.breaks(estimate{out[j], unc[j]}, a.MaxSlowdown) {
			return pred, estimate{}, 0, false
		}
	}
	return pred, mate, 1 - (after - before), true
}

// breaks reports whether a production job predicted to run at p would be
// slowed past its bound (own, else the policy's): at the prediction one
// uncertainty worse, or under Options.BoundOnPrediction at the prediction.
func (e *engine) breaks(p estimate, own float64) bool {
	slow := 1 - p.v
	if !e.opts.BoundOnPrediction {
		slow += p.unc
	}
	return slow > e.bound(own)+1e-9
}

// bestFit is FGD's BestFit cost: the node's free CPU and GPU left after the
// placement, normalised by the largest node.
func (e *engine) bestFit(n *Node, r *Request, taken int) float64 {
	spg := 100
	if len(n.GPUs) > 0 {
		spg = n.GPUs[0].Shares
	}
	return 0.5*float64(n.Free().CPU-r.Res.CPU)/float64(max(e.snap.maxCPU, 1)) +
		0.5*float64(n.FreeShares()-taken)/float64(max(e.snap.maxGPUs*spg, 1))
}

// packing is FGD's GpuPacking score (higher is better).
func (e *engine) packing(n *Node, frac int) float64 {
	wholeFree, sum := 0, 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Whole() {
			wholeFree++
		}
		sum += g.free * 100 / g.Shares
	}
	switch {
	case wholeFree == len(n.GPUs):
		return float64(33 - wholeFree)
	case frac == 0:
		return float64(max(50-wholeFree, 33))
	}
	return float64(max(100-sum/10, 50))
}

func (e *engine) evalWhole(n *Node, r *Request, gi, k int) cand {
	grp := &n.groups[gi]
	var freeMask uint64
	wholeFree := 0
	for li, i := range grp.gpus {
		if n.GPUs[i].Whole() && !n.GPUs[i].Down {
			freeMask |= 1 << li
			wholeFree++
		}
	}
	c := cand{group: gi, gpu: -1, why: whyGPU, pred: 1, mate: 1}
	if wholeFree < k {
		return c
	}
	if e.buddyCells() {
		var b buddyRes
		if nomadsPick(grp, r, k) {
			b = nomadsCell(grp, freeMask, k, r.NomadIndexOrder)
		} else {
			b = e.chooseBuddy(grp, freeMask, k)
		}
		if !b.ok {
			return c
		}
		c.mask, c.worst = b.mask, b.worst
		c.ok = true
		if e.kind == kGpushare {
			c.dfrag = e.f.delta(n, e.wholeChanges(n, grp, c.mask), r.Res) / float64(n.GPUs[grp.gpus[0]].Shares)
			c.cost = [3]float64{-float64(cells.Score(b.worst)), -fgdScore(c.dfrag)}
			if nomadsPick(grp, r, k) { // chooseBuddy weighs this inside a node
				c.cost[2] = float64(b.waste) // free GPUs cut off from whole free cells
			}
		} else {
			c.cost = [3]float64{-float64(cells.Score(b.worst)), float64(b.waste), float64(wholeFree - k)}
		}
		return c
	}
	// Lowest-index free GPUs, as the FGD simulator and Nomad do.
	if e.randomNode() {
		c.mask = randomBits(freeMask, k, e)
	} else {
		c.mask = lowestBits(freeMask, k)
	}
	c.ok = true
	spg := n.GPUs[grp.gpus[0]].Shares
	switch e.kind {
	case kFirstFit:
		c.cost = [3]float64{float64(n.idx)}
	case kBestFit:
		c.cost = [3]float64{-bestFitScore(e.bestFit(n, r, k*spg))}
	case kPacking:
		c.cost = [3]float64{-e.packing(n, 0)}
	case kFGD:
		c.dfrag = e.f.delta(n, e.wholeChanges(n, grp, c.mask), r.Res) / float64(spg)
		c.cost = [3]float64{-fgdScore(c.dfrag)}
	}
	return c
}

// fgdScore is the FGD simulator's integer score for a placement that
// changes the node's fragmentation by dfrag GPUs: ⌊100·sigmoid(-dfrag)⌋.
// Its coarseness (about 0.04 GPU near 0) makes ties, which go to the node
// order, as in that simulator.
func fgdScore(dfrag float64) float64 { return math.Floor(100 / (1 + math.Exp(dfrag))) }

// bestFitScore is the FGD simulator's integer BestFit score for a cost in
// 0..1 (before its min-max normalisation across nodes).
func bestFitScore(cost float64) float64 { return math.Floor(100 * (1 - cost)) }

func (e *engine) wholeChanges(n *Node, grp *gpuGroup, mask uint64) []change {
	out := make([]change, 0, bits.OnesCount64(mask))
	for m := mask; m != 0; m &= m - 1 {
		i := grp.gpus[bits.TrailingZeros64(m)]
		out = append(out, change{i, n.GPUs[i].free, 0})
	}
	return out
}

func lowestBits(mask uint64, k int) uint64 {
	var out uint64
	for ; k > 0 && mask != 0; k-- {
		b := mask & -mask
		out |= b
		mask &^= b
	}
	return out
}

func randomBits(mask uint64, k int, e *engine) uint64 {
	var out uint64
	for ; k > 0 && mask != 0; k-- {
		n := bits.OnesCount64(mask)
		pick := e.rng.IntN(n)
		m := mask
		for ; pick > 0; pick-- {
			m &= m - 1
		}
		b := m & -m
		out |= b
		mask &^= b
	}
	return out
}

type buddyKey struct {
	topo int
	free uint64
	k    int
	min  devicefn.LinkKind
}

type buddyRes struct {
	ok    bool
	mask  uint64
	worst devicefn.Link
	waste int
}

// chooseBuddy picks k free GPUs of a group: the best worst link first, then
// the fewest free GPUs cut off from the whole free cells they belonged to
// (buddy allocation: the smallest free cell that fits, splitting larger
// ones only when needed), then the best total of links.
func (e *engine) chooseBuddy(grp *gpuGroup, free uint64, k int) buddyRes {
	key := buddyKey{grp.topoID, free, k, 0}
	if r, ok := e.buddy[key]; ok {
		return r
	}
	var freeIdx []int
	for m := free; m != 0; m &= m - 1 {
		freeIdx = append(freeIdx, bits.TrailingZeros64(m))
	}
	best := buddyRes{}
	bestSum := -1
	if binom(len(freeIdx), k) <= 4096 {
		pick := make([]int, 0, k)
		var rec func(start int)
		rec = func(start int) {
			if len(pick) == k {
				var mask uint64
				for _, g := range pick {
					mask |= 1 << g
				}
				worst := cells.Worst(grp.links, pick)
				waste := buddyWaste(grp, free, mask, k)
				sum := 0
				for a, i := range pick {
					for _, j := range pick[a+1:] {
						sum += cells.Score(grp.links[i][j])
					}
				}
				better := !best.ok || worst.Better(best.worst) ||
					(worst == best.worst && (waste < best.waste || (waste == best.waste && sum > bestSum)))
				if better {
					best = buddyRes{ok: true, mask: mask, worst: worst, waste: waste}
					bestSum = sum
				}
				return
			}
			for i := start; i <= len(freeIdx)-(k-len(pick)); i++ {
				pick = append(pick, freeIdx[i])
				rec(i + 1)
				pick = pick[:len(pick)-1]
			}
		}
		rec(0)
	} else {
		// Too many subsets: the smallest cell with k free GPUs, lowest GPUs.
		bestSize := 1 << 30
		for c := range grp.tree.Cells {
			m := grp.masks[c] & free
			if bits.OnesCount64(m) >= k && len(grp.tree.Cells[c].GPUs) < bestSize {
				bestSize = len(grp.tree.Cells[c].GPUs)
				best.mask = lowestBits(m, k)
				best.ok = true
			}
		}
		if best.ok {
			var pick []int
			for m := best.mask; m != 0; m &= m - 1 {
				pick = append(pick, bits.TrailingZeros64(m))
			}
			best.worst = cells.Worst(grp.links, pick)
			best.waste = buddyWaste(grp, free, best.mask, k)
		}
	}
	if len(e.buddy) > 1<<16 {
		clear(e.buddy)
	}
	e.buddy[key] = best
	return best
}

// buddyWaste counts the free GPUs that lose the whole free cell they were
// in: the sizes of the largest fully free cells the chosen GPUs come from,
// less the GPUs taken.
func buddyWaste(grp *gpuGroup, free, chosen uint64, k int) int {
	var tops uint64 // bitset of top cells seen (cells < 64 in small trees)
	seen := map[int]bool{}
	waste := 0
	for m := chosen; m != 0; m &= m - 1 {
		c := grp.tree.Leaf[bits.TrailingZeros64(m)]
		top := -1
		for c >= 0 && grp.masks[c]&free == grp.masks[c] {
			top = c
			c = grp.tree.Cells[c].Parent
		}
		if top < 0 {
			continue
		}
		if top < 64 {
			if tops&(1<<top) != 0 {
				continue
			}
			tops |= 1 << top
		} else {
			if seen[top] {
				continue
			}
			seen[top] = true
		}
		waste += len(grp.tree.Cells[top].GPUs)
	}
	return waste - k
}

func binom(n, k int) int {
	if k < 0 || k > n {
		return 0
	}
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > 1<<20 {
			return r
		}
	}
	return r
}
