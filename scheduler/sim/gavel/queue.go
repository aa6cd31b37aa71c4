package gavel

import (
	"cmp"
	"slices"
)

// order sorts the queue in the policy's order; ties keep arrival order.
//
// gpushare serves the highest response ratio first (HRRN):
//
//	ratio = (waited + expected) / expected
//
// where expected is the job's run time alone on this cluster, known in
// advance as SJF-BSBF knows it. Among jobs that have waited as long, the
// shortest goes first, as in SJF; but every waiting job's ratio grows with
// its wait, and the longer a job is, the less it takes to overtake a
// shorter one, so no job is starved by a stream of shorter ones. The rule
// has no parameter.
func (s *sim) order(queue []int) {
	var key func(j Job) float64 // smaller first
	switch s.spec.order {
	case orderFIFO:
		return
	case orderSJF:
		key = s.aloneTime
	case orderHRRN:
		key = func(j Job) float64 { return -responseRatio(s.now-j.Arrival, s.expected(j)) }
	}
	keys := make(map[int]float64, len(queue))
	for _, i := range queue {
		keys[i] = key(s.out[i].Job)
	}
	slices.SortStableFunc(queue, func(a, b int) int {
		if c := cmp.Compare(keys[a], keys[b]); c != 0 {
			return c
		}
		return a - b
	})
}

// responseRatio is (waited + expected) / expected; run times below a second
// count as a second.
func responseRatio(waited, expected float64) float64 {
	expected = max(expected, 1)
	return (waited + expected) / expected
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
