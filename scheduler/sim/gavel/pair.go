package gavel

import (
	"math"
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// pairBenefit is the SJF-BSBF rule: the saving in the two jobs' summed
// completion times (from now) when job j (alone: tj seconds) shares the GPU
// of running job r (alone: tr seconds left) at normalised throughputs nj and
// nr, instead of waiting for r to finish. Positive means pairing wins.
func pairBenefit(tr, tj, nr, nj float64) float64 {
	return queue.PairGain(tr, tj, nr, nj, math.Inf(1))
}

// pairBSBF pairs j with the running job whose pairing saves the most summed
// completion time, if any saves some.
func (s *sim) pairBSBF(j Job) bool {
	tj := s.sjfTime(j)
	best, bestGPU := 0.0, ""
	for _, g := range s.busyGPUs() {
		r, ok := s.partnerOn(g)
		if !ok {
			continue
		}
		nj, nr, fits := s.thr.Pair(j.Type, r.job.Type)
		if !fits {
			continue
		}
		if b := pairBenefit(s.sjfLeft(r), tj, nr, nj); b > best {
			best, bestGPU = b, g
		}
	}
	if bestGPU == "" {
		return false
	}
	s.join(j, bestGPU)
	return true
}

// busyGPUs lists the GPUs in use, sorted.
func (s *sim) busyGPUs() []string {
	gpus := make([]string, 0, len(s.onGPU))
	for g := range s.onGPU {
		gpus = append(gpus, g)
	}
	slices.Sort(gpus)
	return gpus
}

// partnerOn returns the single-GPU job alone on a GPU.
func (s *sim) partnerOn(uuid string) (*running, bool) {
	ids := s.onGPU[uuid]
	if len(ids) != 1 {
		return nil, false
	}
	r := s.run[ids[0]]
	return r, len(r.gpus) == 1
}

// join starts j on the free half of the GPU that a running job holds alone.
func (s *sim) join(j Job, uuid string) {
	r, _ := s.partnerOn(uuid)
	used := map[string]bool{}
	for _, sh := range r.shares {
		used[sh] = true
	}
	var free []string
	for k := 0; k < devicefn.DefaultSharesPerGPU && len(free) < devicefn.DefaultSharesPerGPU/2; k++ {
		if id := (devicefn.ShareID{UUID: uuid, Index: k}).String(); !used[id] {
			free = append(free, id)
		}
	}
	s.addHalf(j, s.gpuNode[uuid], uuid, free)
}
