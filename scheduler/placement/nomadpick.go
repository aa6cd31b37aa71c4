package placement

import (
	"math/rand/v2"
	"strconv"
)

// NomadPicksGPU re-chooses the GPU of a decision of one allocation on one
// GPU (a fraction, or one whole GPU) as Nomad's device allocator would if
// each GPU were a device group of its own and the pin named only the node
// (docs/device-contract.md, "One group per GPU"): uniformly among the
// node's healthy GPUs of the same model with room for it (Nomad walks its
// device groups in Go's map order), taking their lowest free shares. A
// decision of several allocations or GPUs, or on a shared MIG instance, is
// left as it is. The simulator uses it to measure what leaving the GPU
// to Nomad costs; the service never does.
func (s *Snapshot) NomadPicksGPU(d *Decision, rng *rand.Rand) {
	s.nomadPicks(d, func(fits []int) int { return fits[rng.IntN(len(fits))] })
}

// NomadPicksFirstGPU is NomadPicksGPU where every request carries the
// same fixed device affinity that ranks a node's GPUs by index: Nomad then
// takes the lowest-indexed GPU with room, deterministically.
func (s *Snapshot) NomadPicksFirstGPU(d *Decision) {
	s.nomadPicks(d, func(fits []int) int { return fits[0] })
}

func (s *Snapshot) nomadPicks(d *Decision, pick func(fits []int) int) {
	if !d.Placed() || len(d.Placements) != 1 || len(d.Placements[0].GPUs) != 1 {
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
	g := &n.GPUs[pick(fits)]
	p.GPUs = []string{g.UUID}
	p.Shares = shareIDs(g.UUID, g.lowestFree(take))
	p.Cell = ""
	p.Reason += "; GPU " + g.UUID + " chosen by Nomad among " + strconv.Itoa(len(fits))
}

// NomadChoosesGPU reports whether Nomad alone keeps each of d's
// allocations on one GPU when the pin names only their nodes: every
// placement holds at most one GPU, a whole GPU its plugin offers as a
// device group of its own (device_groups = "gpu"), not a shared MIG
// instance (whose group holds several), and no time-sliced allocation
// (Nomad's pick would not keep it off GPUs of other kinds). Such a
// decision may be pinned by
// node alone (pin.ContractNode), a pin Nomad checks in place.
func (s *Snapshot) NomadChoosesGPU(d *Decision) bool {
	if !d.Placed() {
		return false
	}
	for _, p := range d.Placements {
		if len(p.GPUs) > 1 || (p.req != nil && p.req.Timeslice) {
			return false // Nomad's pick would not keep time-sliced jobs apart
		}
		for _, u := range p.GPUs {
			ref, ok := s.byUUID[u]
			if !ok {
				return false
			}
			g := &ref.node.GPUs[ref.gpu]
			if g.inst || !ref.node.groups[g.group].perGPU {
				return false
			}
		}
	}
	return true
}
