package queue

import (
	"fmt"
	"math"
	"slices"
)

// Shadow is a bound on every job's wait: the schedule the same queue would
// have had on the same cluster with no sharing, first come first served,
// at the jobs' expected run times (exclusive FCFS). It advances with the
// real clock and the jobs that arrive, never with what the real schedule
// does, so a job's shadow start is when it would have started had the
// cluster been run exclusively. A scheduler that serves the queue shortest
// first serves a job whose shadow start has passed before any other
// (queue.Overdue in decide's order): with exact run times, a job that
// starts by its shadow start and runs alone, or beside a partner within
// the slowdown its pairing allows, ends no later than it would have under
// exclusive FCFS, plus that slowdown; with run times that are wrong the
// shadow is wrong by as much, and the bound loosens with it.
//
// Times are seconds on the caller's clock. The cluster is nodes of equal
// GPU count; a job of up to one node's GPUs takes the node that fits it
// most tightly (best fit, ties to the lowest index), a larger one takes
// whole nodes; a job that does not fit does not hold back later ones, as
// in the exclusive baseline.
type Shadow struct {
	per     int   // GPUs per node
	free    []int // free GPUs per node
	now     float64
	run     []shadowRun
	wait    []shadowJob // arrival order
	started map[int]float64
	arrived map[int]shadowJob
	// jcts are the completion times (from arrival) of the jobs started so
	// far, sorted.
	jcts []float64
}

type shadowJob struct {
	id      int
	gpus    int
	arrival float64
	runFor  float64
}

type shadowRun struct {
	end   float64
	nodes []int // one entry per GPU held, by node
}

// NewShadow returns the shadow of a cluster of nodes × perNode GPUs, at
// time 0.
func NewShadow(nodes, perNode int) (*Shadow, error) {
	if nodes < 1 || perNode < 1 {
		return nil, fmt.Errorf("shadow of %d node(s) of %d GPU(s): want at least one of each", nodes, perNode)
	}
	free := make([]int, nodes)
	for i := range free {
		free[i] = perNode
	}
	return &Shadow{per: perNode, free: free, started: map[int]float64{}, arrived: map[int]shadowJob{}}, nil
}

// Arrive queues job id, needing gpus GPUs for runFor seconds, at time at
// (advancing the shadow to it). Arrivals come in time order; a job arriving
// earlier than the shadow's clock arrives now. A job larger than the
// cluster never starts.
func (s *Shadow) Arrive(id int, at float64, gpus int, runFor float64) error {
	if gpus < 1 {
		return fmt.Errorf("shadow job %d: %d GPUs, want at least one", id, gpus)
	}
	if _, ok := s.arrived[id]; ok {
		return fmt.Errorf("shadow job %d arrived twice", id)
	}
	s.Advance(at)
	j := shadowJob{id: id, gpus: gpus, arrival: s.now, runFor: max(runFor, 0)}
	s.arrived[id] = j
	if gpus > s.per*len(s.free) {
		return nil // never starts: no bound
	}
	s.wait = append(s.wait, j)
	s.startFitting()
	return nil
}

// Advance runs the shadow to time to: jobs end and the waiting ones start
// in arrival order as they fit.
func (s *Shadow) Advance(to float64) {
	for {
		s.startFitting()
		next := math.Inf(1)
		for _, r := range s.run {
			next = min(next, r.end)
		}
		if next > to {
			break
		}
		s.now = max(s.now, next)
		kept := s.run[:0]
		for _, r := range s.run {
			if r.end <= next {
				for _, n := range r.nodes {
					s.free[n]++
				}
				continue
			}
			kept = append(kept, r)
		}
		s.run = kept
	}
	s.now = max(s.now, to)
}

// Start is when job id starts in the shadow, and whether it has started by
// the shadow's clock.
func (s *Shadow) Start(id int) (float64, bool) {
	t, ok := s.started[id]
	return t, ok
}

// Bound is the latest start the wait bound allows job id, and whether it
// has one yet: its start in the shadow, or, when later, the start that
// would make its completion time (from arrival, at its expected run time)
// the shadow's q-quantile so far (TailJCT). A job may wait past its
// exclusive FCFS start while its completion stays within the tail that
// exclusive FCFS gives the whole queue; past both it goes first. A job not
// started in the shadow yet has none (its shadow start is still ahead).
func (s *Shadow) Bound(id int, q float64) (float64, bool) {
	start, ok := s.started[id]
	if !ok {
		return 0, false
	}
	j := s.arrived[id]
	return max(start, j.arrival+s.TailJCT(q)-j.runFor), true
}

// TailJCT is the q-quantile (nearest rank, q in (0, 1]) of the completion
// times, from arrival, of the jobs the shadow has started so far, or 0
// when none has.
func (s *Shadow) TailJCT(q float64) float64 {
	if len(s.jcts) == 0 || !(q > 0) {
		return 0
	}
	k := int(math.Ceil(min(q, 1)*float64(len(s.jcts)))) - 1
	return s.jcts[max(k, 0)]
}

// startFitting starts the waiting jobs that fit now, in arrival order.
func (s *Shadow) startFitting() {
	kept := s.wait[:0]
	for k, j := range s.wait {
		if !slices.ContainsFunc(s.free, func(f int) bool { return f > 0 }) {
			kept = append(kept, s.wait[k:]...) // the cluster is full
			break
		}
		nodes, ok := s.fit(j.gpus)
		if !ok {
			kept = append(kept, j)
			continue
		}
		for _, n := range nodes {
			s.free[n]--
		}
		s.run = append(s.run, shadowRun{end: s.now + j.runFor, nodes: nodes})
		s.started[j.id] = s.now
		jct := s.now + j.runFor - j.arrival
		i, _ := slices.BinarySearch(s.jcts, jct)
		s.jcts = slices.Insert(s.jcts, i, jct)
	}
	clear(s.wait[len(kept):])
	s.wait = kept
}

// fit returns the nodes of a job of gpus GPUs (one entry per GPU), or false
// when it does not fit now.
func (s *Shadow) fit(gpus int) ([]int, bool) {
	if gpus <= s.per {
		best := -1
		for n, f := range s.free {
			if f >= gpus && (best < 0 || f < s.free[best]) {
				best = n
			}
		}
		if best < 0 {
			return nil, false
		}
		return slices.Repeat([]int{best}, gpus), true
	}
	need := (gpus + s.per - 1) / s.per
	var out []int
	for n, f := range s.free {
		if f == s.per {
			out = append(out, slices.Repeat([]int{n}, s.per)...)
			if need--; need == 0 {
				return out, true
			}
		}
	}
	return nil, false
}
