package placement

import (
	"fmt"
	"math/bits"
	"strings"
)

// explain builds the refusal for a request no node could take, naming the
// rule that failed and the closest the cluster came. A request that allows
// some nodes only is explained on those, and says so.
func (e *engine) explain(s *Snapshot, r *Request) *Refusal {
	ref := e.explainAmong(s, r)
	if r.Allowed == nil || ref.Code == RefusedRules {
		return ref
	}
	allowed := 0
	for _, n := range s.nodes {
		if e.allowed(n) {
			allowed++
		}
	}
	ref.Message += fmt.Sprintf(" (on the %d of %d nodes the job's own rules allow)", allowed, len(s.nodes))
	return ref
}

func (e *engine) explainAmong(s *Snapshot, r *Request) *Refusal {
	var tally [whyCPU + 1]int // by why
	fits := 0
	var mostFree, mostFrac, largestCell int
	var mostFreeNode, mostFracNode, cellNode, cellName string
	var modelSeen []string
	maxGPUs, spg, capped := 0, 0, 0 // capped: shares per GPU of a per-GPU group (pergpu.go)
	var capWhy uint8                // why capped (capNoMux, capMixed)
	var mig []string                // models of shared MIG instances
	largest := 0
	for _, n := range s.nodes {
		c := e.eval(n, r, -1)
		tally[c.why]++
		if c.ok {
			fits++ // one allocation fits here
		}
		if c.why == whyRules {
			continue // not the job's: its GPUs are no measure
		}
		for gi := range n.groups {
			grp := &n.groups[gi]
			if !r.modelOK(grp.model) {
				modelSeen = appendUnique(modelSeen, grp.model)
				continue
			}
			spg = n.GPUs[grp.gpus[0]].Shares
			if grp.mig {
				mig, largest = appendUnique(mig, grp.model), max(largest, grp.cap)
			} else {
				k, why := n.wholeCap(gi, r)
				maxGPUs = max(maxGPUs, k)
				if k < len(grp.gpus) {
					capped, capWhy = spg, capWhy|why
				}
			}
			var freeMask uint64
			whole := 0
			for li, i := range grp.gpus {
				g := &n.GPUs[i]
				if g.Down {
					continue
				}
				if g.Whole() {
					freeMask |= 1 << li
					whole++
				}
				if g.free > mostFrac {
					mostFrac, mostFracNode = g.free, n.label()
				}
			}
			if whole = min(whole, n.maxWhole(gi, r)); whole > mostFree {
				mostFree, mostFreeNode = whole, n.label()
			}
			for ci := range grp.tree.Cells {
				if grp.mig {
					break // instances are no cell's
				}
				m := grp.masks[ci]
				if m&freeMask == m && bits.OnesCount64(m) > largestCell {
					largestCell, cellNode, cellName = bits.OnesCount64(m), n.label(), grp.tree.Name(ci)
				}
			}
		}
	}
	models := "any model"
	if len(r.Models) > 0 {
		models = strings.Join(r.Models, " or ")
	}
	frac, whole, sizeOK := shareSize(r.Shares, max(spg, 1))
	if frac > 0 && e.rounds() {
		frac, whole = 0, 1
	}
	switch {
	case len(s.nodes) == 0:
		return &Refusal{RefusedNoCapacity, "the cluster has no nodes"}
	case tally[whyRules] == len(s.nodes):
		return &Refusal{RefusedRules, fmt.Sprintf("none of the cluster's %d nodes passes the job's own rules (datacenters, node pool, constraints, drivers, devices, volumes, distinct_hosts)", len(s.nodes))}
	case r.Shares > 0 && spg == 0:
		return &Refusal{RefusedNoModel, fmt.Sprintf("no node has GPUs of %s (the cluster has %s)", models, strings.Join(modelSeen, ", "))}
	case r.Shares > 0 && !sizeOK:
		return &Refusal{RefusedInvalid, fmt.Sprintf("%d shares is neither a fraction of one GPU (fewer than %d) nor whole GPUs (a multiple of %d): ask for %d or %d", r.Shares, spg, spg, r.Shares/spg*spg, (r.Shares/spg+1)*spg)}
	case whole > maxGPUs:
		msg := tooManyGPUs(whole, maxGPUs, largest, models, mig)
		if migOnly(whole, 0, largest, mig) != "" && e.rounds() {
			msg += fmt.Sprintf(" (%s takes whole GPUs for a fraction)", e.name)
		}
		if capped > 0 {
			msg += "; " + perGPUNote(whole, capped, capWhy)
		}
		return &Refusal{RefusedTooLarge, msg}
	case onlyInstancesTooSmall(frac, maxGPUs, largest, models, mig) != "":
		return &Refusal{RefusedTooLarge, onlyInstancesTooSmall(frac, maxGPUs, largest, models, mig)}
	case tally[whyInterference] > 0 && tally[whyGPU] == 0 && tally[whyCPU] == 0:
		return &Refusal{RefusedInterference, fmt.Sprintf("%d nodes have room, but sharing a GPU there would slow a production job by more than its bound (%.0f%% for this job); give the job a profile, a larger bound, or whole GPUs",
			tally[whyInterference], 100*e.bound(r.MaxSlowdown))}
	case r.Count > 1 && fits > 0:
		// one allocation fits somewhere: what is short is room for all
		return &Refusal{RefusedNoCapacity, fmt.Sprintf("needs %d allocations of %d shares of %s; the %d node(s) that can take one hold about %d of them now",
			r.Count, r.Shares, models, fits, e.roomFor(s, r, frac, whole))}
	case r.Shares > 0 && tally[whyGPU] > 0 && whole > 0:
		msg := fmt.Sprintf("needs %d free GPUs of %s on one node; the most on any node is %d", whole, models, mostFree)
		if mostFreeNode != "" {
			msg += " (node " + mostFreeNode + ")"
		}
		if e.buddyCells() && largestCell > 0 {
			msg += fmt.Sprintf(", and the largest free cell is %d GPUs (%s on node %s)", largestCell, cellName, cellNode)
		}
		return &Refusal{RefusedTopology, msg}
	case r.Shares > 0 && whole == 0 && tally[whyTimeslice] > 0:
		return &Refusal{RefusedNoCapacity, e.timesliceNote(r, frac, tally[whyTimeslice])}
	case r.Shares > 0 && tally[whyGPU] > 0:
		msg := fmt.Sprintf("needs %d shares on one GPU of %s; the most free on any GPU is %d", frac, models, mostFrac)
		if mostFracNode != "" {
			msg += " (node " + mostFracNode + ")"
		}
		if tally[whyInterference] > 0 {
			// the GPUs with room are refused by a bound, not by room: say
			// so, or "needs 50, the most free is 50" reads as a contradiction
			msg += fmt.Sprintf("; on %d node(s) a GPU has room, but sharing it would slow a production job by more than its bound (%.0f%% for this job)",
				tally[whyInterference], 100*e.bound(r.MaxSlowdown))
		}
		return &Refusal{RefusedNoCapacity, msg}
	case tally[whyCPU] > 0:
		best := Resources{}
		for _, n := range s.nodes {
			if r.Allowed != nil && !e.allowed(n) {
				continue
			}
			f := n.Free()
			if f.CPU > best.CPU {
				best.CPU = f.CPU
			}
			if f.MemoryMiB > best.MemoryMiB {
				best.MemoryMiB = f.MemoryMiB
			}
		}
		return &Refusal{RefusedNoCapacity, fmt.Sprintf("%d nodes have the GPUs but not cpu %d and memory %d MiB free (the most free: cpu %d, memory %d MiB)",
			tally[whyCPU], r.Res.CPU, r.Res.MemoryMiB, best.CPU, best.MemoryMiB)}
	case tally[whyAvoid] > 0:
		return &Refusal{RefusedNoCapacity, fmt.Sprintf("only the %d nodes the request avoids could take it", tally[whyAvoid])}
	}
	return &Refusal{RefusedNoCapacity, fmt.Sprintf("no node can hold %d allocations of %d shares of %s with cpu %d and memory %d MiB", r.Count, r.Shares, models, r.Res.CPU, r.Res.MemoryMiB)}
}

// roomFor is about how many allocations of r (frac shares of a GPU, or
// whole GPUs) the nodes that can take one hold now: their free GPUs under
// the rules that keep a group's allocations apart (pergpu.go), their CPU
// and memory, one per node for distinct_hosts.
func (e *engine) roomFor(s *Snapshot, r *Request, frac, whole int) int {
	total := 0
	for _, n := range s.nodes {
		if !e.eval(n, r, -1).ok {
			continue
		}
		k := 0
		for gi := range n.groups {
			grp := &n.groups[gi]
			if !r.modelOK(grp.model) || grp.mig && whole > 0 {
				continue
			}
			fit := 0
			for _, i := range grp.gpus {
				g := &n.GPUs[i]
				switch {
				case g.Down:
				case frac > 0:
					fit += g.free / frac
				case g.Whole():
					fit++
				}
			}
			if whole > 0 {
				fit = min(fit/whole, grp.wholeSlots(whole, n.staged(r)))
			} else if frac > 0 {
				fit = min(fit, grp.fracSlots(g0Shares(n, grp), frac, n.staged(r)))
			}
			k += fit
		}
		f := n.Free()
		if r.Res.CPU > 0 {
			k = min(k, int(f.CPU/r.Res.CPU))
		}
		if r.Res.MemoryMiB > 0 {
			k = min(k, int(f.MemoryMiB/r.Res.MemoryMiB))
		}
		if r.DistinctNodes {
			k = min(k, 1)
		}
		total += k
	}
	return total
}

// g0Shares is shares_per_gpu of a group's GPUs.
func g0Shares(n *Node, grp *gpuGroup) int { return n.GPUs[grp.gpus[0]].Shares }

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
