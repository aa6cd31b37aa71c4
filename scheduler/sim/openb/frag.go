package openb

import (
	"slices"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// fragTracker keeps FGD's cluster fragmentation, Σ F(n), up to date by
// recomputing only the nodes a placement touched (pods never leave).
type fragTracker struct {
	mix    placement.Mix
	byNode map[string]float64
	total  float64 // GPUs
	idle   float64 // free GPUs
	free   map[string]float64
}

func newFragTracker(s *placement.Snapshot, mix placement.Mix) *fragTracker {
	f := &fragTracker{mix: mix, byNode: map[string]float64{}, free: map[string]float64{}}
	for _, n := range s.Nodes() {
		f.set(n)
	}
	return f
}

func (f *fragTracker) set(n *placement.Node) {
	v, free := NodeFrag(n, f.mix)
	f.total += v - f.byNode[n.ID]
	f.idle += free - f.free[n.ID]
	f.byNode[n.ID], f.free[n.ID] = v, free
}

func (f *fragTracker) update(s *placement.Snapshot, id string) {
	if n, ok := s.Node(id); ok {
		f.set(n)
	}
}

// ratio is FGD's frag ratio: 100 x frag / idle GPU capacity.
func (f *fragTracker) ratio() float64 {
	if f.idle <= 1e-9 {
		return 0
	}
	return 100 * f.total / f.idle
}

// NodeFrag returns FGD's F(n) = Σ_m p_m f(n, m) in GPUs and the node's free
// GPUs (FGD_METHOD.md section 6): for each typical request m, the free
// capacity it could not use — all of it when m is CPU-only, of another
// model, or does not fit (too few GPUs with enough free, or too little
// CPU); otherwise the free capacity of the GPUs too small for it. A shared
// MIG instance's free shares count as shares of its parent, and it is too
// small for every whole-GPU kind.
func NodeFrag(n *placement.Node, mix placement.Mix) (frag, free float64) {
	total := 0
	for i := range n.GPUs {
		total += n.GPUs[i].Free()
	}
	if len(n.GPUs) == 0 {
		return 0, 0
	}
	spg := n.GPUs[0].Shares
	cpu := n.Free().CPU
	for _, t := range mix {
		f := total
		need, k := t.Shares, 1
		if t.Shares >= spg {
			need, k = spg, t.Shares/spg
		}
		if t.Shares > 0 && (len(t.Models) == 0 || slices.Contains(t.Models, n.GPUs[0].Model)) && cpu >= t.CPU {
			fit, small := 0, 0
			for i := range n.GPUs {
				// a shared MIG instance never holds a whole GPU: its free
				// shares (of its parent) are all too few for one
				if g := n.GPUs[i].Free(); g >= need && (k == 1 && need < spg || !n.GPUs[i].MIG()) {
					fit++
				} else {
					small += g
				}
			}
			if fit >= k {
				f = small
			}
		}
		frag += t.Weight * float64(f)
	}
	return frag / float64(spg), float64(total) / float64(spg)
}
