package gavel

import (
	"cmp"
	"slices"
)

// order sorts the queue of a baseline in its order; ties keep arrival
// order. (The gpushare policies are ordered by the service's step.)
func (s *sim) order(waiting []int) {
	var key func(j Job) float64 // smaller first
	switch s.spec.order {
	case orderFIFO:
		return
	case orderSJF:
		key = s.sjfTime
	}
	keys := make(map[int]float64, len(waiting))
	for _, i := range waiting {
		keys[i] = key(s.out[i].Job)
	}
	slices.SortStableFunc(waiting, func(a, b int) int {
		if c := cmp.Compare(keys[a], keys[b]); c != 0 {
			return c
		}
		return a - b
	})
}

// expected is job j's run time alone on this cluster, as a user who knows
// the job's length would expect it: a job larger than a server runs at the
// throughput Gavel measured across servers.
func (s *sim) expected(j Job) float64 {
	v, _ := s.thr.Isolated(j.Type, j.Scale, j.Scale <= s.cluster.GPUsPerNode)
	return j.Steps / v
}

// aloneTime is job j's run time alone on one server (SJF-BSBF's length).
func (s *sim) aloneTime(j Job) float64 {
	v, _ := s.thr.Isolated(j.Type, j.Scale, true)
	return j.Steps / v
}

// sjfTime is the length SJF-BSBF orders and pairs job j by: its run time
// alone, as declared (exactly, unless the run perturbs run times; the
// default when none is declared).
func (s *sim) sjfTime(j Job) float64 {
	if s.opts.Robustness.Exact() {
		return s.aloneTime(j)
	}
	if t := s.declared(j); t > 0 {
		return t
	}
	return defaultExpected.Seconds()
}

// sjfLeft is how long SJF-BSBF believes running job r needs alone.
func (s *sim) sjfLeft(r *running) float64 {
	if s.opts.Robustness.Exact() {
		return r.rem / r.iso
	}
	return s.sjfTime(r.job) * r.rem / r.job.Steps
}
