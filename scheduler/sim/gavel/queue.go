package gavel

import (
	"cmp"
	"slices"

	"github.com/gpushare/gpushare/scheduler/queue"
)

// order sorts the queue in the policy's order; ties keep arrival order.
//
// gpushare serves the highest response ratio first (queue.ResponseRatio,
// the scheduler service's order): (waited + expected) / expected, where
// expected is the job's run time alone on this cluster, known in advance
// as SJF-BSBF knows it.
func (s *sim) order(waiting []int) {
	var key func(j Job) float64 // smaller first
	switch s.spec.order {
	case orderFIFO:
		return
	case orderSJF:
		key = s.aloneTime
	case orderHRRN:
		key = func(j Job) float64 { return -responseRatio(s.now-j.Arrival, s.expected(j)) }
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

// responseRatio is queue.ResponseRatio, the service's order, on the
// simulator's seconds.
func responseRatio(waited, expected float64) float64 {
	return queue.ResponseRatio(queue.Seconds(waited), queue.Seconds(expected))
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
