package gavel

import (
	"math"
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
)

// pairBenefit is the SJF-BSBF rule: the saving in the two jobs' summed
// completion times (from now) when job j (alone: tj seconds) shares the GPU
// of running job r (alone: tr seconds left) at normalised throughputs nj and
// nr, instead of waiting for r to finish. Positive means pairing wins.
func pairBenefit(tr, tj, nr, nj float64) float64 {
	return pairGain(tr, tj, nr, nj, math.Inf(1))
}

// pairGain is pairBenefit when j, if it does not pair, starts after w
// seconds on a GPU of its own or on r's when r finishes, whichever is
// first: waiting costs tr + min(w, tr) + tj.
func pairGain(tr, tj, nr, nj, w float64) float64 {
	wait := tr + min(w, tr) + tj
	var pair float64
	if a := tr / nr; a <= tj/nj {
		pair = a + a + (tj - a*nj) // r first; j finishes alone
	} else {
		b := tj / nj
		pair = b + b + (tr - b*nr)
	}
	return wait - pair
}

// pairEnd is when the later of two paired jobs finishes (see pairGain).
func pairEnd(tr, tj, nr, nj float64) float64 {
	if a := tr / nr; a <= tj/nj {
		return a + (tj - a*nj)
	}
	b := tj / nj
	return b + (tr - b*nr)
}

// pairBSBF pairs j with the running job whose pairing saves the most summed
// completion time, if any saves some.
func (s *sim) pairBSBF(j Job) bool {
	tj := s.aloneTime(j)
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
		if b := pairBenefit(r.rem/r.iso, tj, nr, nj); b > best {
			best, bestGPU = b, g
		}
	}
	if bestGPU == "" {
		return false
	}
	s.join(j, bestGPU)
	return true
}

// pairShare is gpushare's pairing rule for a single-GPU job j that found no
// free GPU. Among the GPUs held by one single-GPU job r whose memory can
// take j too, it predicts both jobs' normalised throughputs (as observed if
// the two job types have shared before, else by the interference model),
// keeps the pairings that hold both within their slowdown bound and delay
// no reservation, and takes the one that saves the most summed completion
// time over waiting, if any saves some. Waiting means starting when the
// first GPU not claimed by the jobs ahead of j in the queue frees, or when r
// finishes.
func (s *sim) pairShare(j Job) bool {
	pj, ok := s.opts.Model.Lookup(j.Type)
	if !ok {
		return false // an unprofiled job does not share
	}
	tj := s.expected(j)
	w := s.gpuFreeIn(s.ahead)
	bound := s.opts.MaxSlowdown + 1e-9
	best, bestGPU := 0.0, ""
	for _, g := range s.busyGPUs() {
		r, ok := s.partnerOn(g)
		if !ok {
			continue
		}
		if _, _, fits := s.thr.Pair(j.Type, r.job.Type); !fits {
			continue // not in memory together
		}
		nr, nj, ok := s.predictPair(r.job.Type, j.Type, pj)
		if !ok || 1-nr > bound || 1-nj > bound {
			continue
		}
		tr := r.rem / r.iso
		if !s.mayUse(j.ID, s.gpuNode[g], pairEnd(tr, tj, nr, nj)) {
			continue
		}
		if b := pairGain(tr, tj, nr, nj, w); b > best {
			best, bestGPU = b, g
		}
	}
	if bestGPU == "" {
		return false
	}
	s.join(j, bestGPU)
	return true
}

// predictPair returns the normalised throughputs of a running job of type
// a and a new job of type b (profile pb) on one GPU: as observed when the
// two types have shared, else as the interference model predicts.
func (s *sim) predictPair(a, b string, pb interference.Profile) (na, nb float64, ok bool) {
	if v, seen := s.seen[pairKey{a, b}]; seen {
		return v[0], v[1], true
	}
	pa, ok := s.opts.Model.Lookup(a)
	if !ok {
		return 0, 0, false
	}
	p := s.opts.Model.Predict([]interference.Profile{pa, pb})
	return p[0], p[1], true
}

// gpuFreeIn returns how long until the (k+1)-th GPU is free, counting the
// free ones first and the busy ones at their jobs' current rates (+Inf when
// the cluster has too few).
func (s *sim) gpuFreeIn(k int) float64 {
	free := s.cluster.GPUs() - len(s.onGPU)
	if k < free {
		return 0
	}
	k -= free
	if k >= len(s.onGPU) {
		return math.Inf(1)
	}
	ts := make([]float64, 0, len(s.onGPU))
	for _, ids := range s.onGPU {
		t := 0.0
		for _, id := range ids {
			r := s.run[id]
			t = max(t, r.rem/r.rate)
		}
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts[k]
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
