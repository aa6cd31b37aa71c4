package gavel

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// The gpushare policies run the scheduling service's own decision step
// (decide.Step) and execute its actions on the simulated cluster: a Pin
// starts the job where the step placed it, a Refuse drops a job the
// cluster can never hold, a Wait leaves it queued. Queue order,
// reservations and pairing are the service's; the simulator adds only what
// a live cluster would tell the service: when running jobs are expected to
// end (believedLeft: as the service reckons it from the declared run
// times, which with exact ones is their true remaining work at their
// current rates) and which job types fit in one GPU's memory together
// (Gavel's measurements).

// epoch is the simulator's time 0 as the step's clock.
var epoch = time.Unix(0, 0).UTC()

func at(seconds float64) time.Time { return epoch.Add(queue.Seconds(seconds)) }

// defaultExpected is the run time the gpushare-fifo ablation assumes for
// every job: with one run time for all, the response-ratio order is the
// arrival order.
const defaultExpected = time.Hour

// jobKey names job i as the step's group.
func jobKey(i int) decide.Key { return decide.Key{Job: fmt.Sprintf("job-%06d", i)} }

// scheduleLoop runs one decision step over the queue and executes its
// actions; it returns the jobs still waiting.
func (s *sim) scheduleLoop(waiting []int) []int {
	running := s.observe()
	if len(waiting) == 0 && len(running) == 0 {
		return waiting
	}
	s.advanceShadow()
	byKey := make(map[decide.Key]int, len(waiting))
	groups := make([]decide.Group, 0, len(waiting))
	for _, i := range waiting {
		j := s.out[i].Job
		k := jobKey(j.ID)
		byKey[k] = i
		g := decide.Group{Key: k, Req: s.loopRequest(j, k), Submit: at(j.Arrival)}
		if s.shadow != nil {
			if t, ok := s.shadow.Bound(j.ID, s.opts.BoundTail); ok {
				g.Bound = at(t)
			}
		}
		groups = append(groups, g)
	}
	ends := map[string]time.Time{}
	for _, r := range s.run {
		if !s.spec.reserve || s.declared(r.job) == 0 {
			continue // no run time declared: the step expects the default
		}
		end := at(s.now + s.believedLeft(r))
		for _, a := range r.allocs {
			ends[a] = end
		}
	}
	cfg := decide.Config{DefaultExpected: defaultExpected, Reservations: s.spec.reserve, IdleFirst: true, MaxSlowdown: s.opts.MaxSlowdown,
		WaitBound: s.shadow != nil, ShortestFirst: s.shadow != nil, MaxStretch: max(s.opts.MaxStretch, 0)}
	if s.introspecting() && s.opts.boundedCost() {
		cfg.ObserveWithin = queue.Seconds(s.opts.ObserveAfter)
	}
	in := decide.Input{Snapshot: s.snap, Groups: groups, Ends: ends, Now: at(s.now), Compatible: s.fitsWith, Running: running, Stretched: s.stretched()}
	left := waiting[:0:0]
	placed, unpaired := false, false
	restore := s.lend()
	actions := decide.Step(s.pol, in, cfg)
	restore()
	if victims := s.blocking(actions); len(victims) > 0 {
		// Waiting work takes GPUs that grown replicas hold: their jobs
		// shrink, newest replicas first, and the queue is decided again.
		s.shrinkFor(victims)
		return s.scheduleLoop(waiting)
	}
	if s.opts.OnStep != nil {
		s.opts.OnStep(s.now, actions)
	}
	for _, a := range actions {
		if a.Kind == decide.Unpair {
			left = append(left, s.unpair(a))
			unpaired = true
			continue
		}
		i, ok := byKey[a.Group]
		if !ok {
			panic(fmt.Sprintf("step acted on unknown group %s", a.Group))
		}
		switch a.Kind {
		case decide.Pin, decide.Repin:
			if err := s.snap.Apply(a.Decision); err != nil {
				panic(err) // the step decided on this snapshot
			}
			var shares []string
			if s.out[i].Job.Scale == 1 {
				shares = a.Decision.Placements[0].Shares
			}
			s.start(s.out[i].Job, a.Decision.Placements, shares)
			placed = true
		case decide.Refuse:
			// larger than the cluster: dropped, Placed stays false
		case decide.Wait:
			left = append(left, i)
		}
	}
	if placed || unpaired {
		s.rates()
	}
	if unpaired {
		// The moved jobs wait again: decide them at once, first by their
		// original arrival.
		slices.Sort(left)
		return s.scheduleLoop(left)
	}
	return left
}

// advanceShadow brings the wait bound's shadow (queue.Shadow: the jobs
// arrived so far, run exclusively first come first served at their
// declared run times, the default where none is) to now.
func (s *sim) advanceShadow() {
	if s.shadow == nil {
		return
	}
	for ; s.shadowNext < len(s.out) && s.out[s.shadowNext].Job.Arrival <= s.now; s.shadowNext++ {
		j := s.out[s.shadowNext].Job
		t := s.declared(j)
		if t <= 0 {
			t = defaultExpected.Seconds()
		}
		if err := s.shadow.Arrive(j.ID, j.Arrival, j.Scale, t); err != nil {
			panic(err) // jobs are numbered in arrival order, once each
		}
	}
	s.shadow.Advance(s.now)
}

// loopRequest is job j's request as a user of the service would write it:
// whole GPUs per server for a multi-GPU job, half a GPU for a single-GPU
// job (which gets a GPU of its own while one is idle), as a production job
// with its type's profile and the slowdown bound.
func (s *sim) loopRequest(j Job, k decide.Key) placement.Request {
	const spg = devicefn.DefaultSharesPerGPU
	r := placement.Request{ID: k.Job, Count: 1, Shares: spg / 2, Class: placement.ClassProduction, MaxSlowdown: s.opts.MaxSlowdown}
	if p, ok := s.opts.Model.Lookup(j.Type); ok {
		r.Profile = p
	}
	if j.Scale > 1 {
		per := min(j.Scale, s.cluster.GPUsPerNode)
		r.Shares, r.Count = per*spg, (j.Scale+per-1)/per
	}
	if s.spec.reserve {
		r.Expected = queue.Seconds(s.declared(j)) // declared run times
	}
	return r
}

// fitsWith reports whether group g's job fits in one GPU's memory with the
// job of allocation alloc (Gavel measured which pairs of types do).
func (s *sim) fitsWith(g decide.Key, alloc string) bool {
	var id, other int
	if _, err := fmt.Sscanf(g.Job, "job-%d", &id); err != nil {
		return false
	}
	// running, or placed earlier in this step (the step names a job's
	// allocations after its request: job-<n>[<k>])
	if _, err := fmt.Sscanf(alloc, "job-%d", &other); err != nil {
		return false
	}
	_, _, fits := s.thr.Pair(s.out[id].Job.Type, s.out[other].Job.Type)
	return fits
}

// stretched is, by allocation, what sharing has cost each running job so
// far as a share of its declared run time (decide.Input.Stretched), as
// the service charges it: a job that declares none (gpushare-fifo, or no
// run times under -robustness) is not bounded, and a run time declared
// wrong (run times off) is the one divided by.
func (s *sim) stretched() map[string]float64 {
	out := map[string]float64{}
	if !s.spec.reserve {
		return out // no run time declared
	}
	for _, r := range s.run {
		if r.out.SharedLoss <= 0 {
			continue
		}
		if d := s.declared(r.job); d > 0 {
			for _, a := range r.allocs {
				out[a] = r.out.SharedLoss / d
			}
		}
	}
	return out
}
