package gavel

import (
	"math"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
)

// Introspection, as the service does it on a live cluster: a pair's
// progress becomes visible ObserveAfter after its GPU's company changed;
// the gpushare policies then record it in what they know of interference
// (per job, partner and GPU model) and hand it to the decision step, which
// unpairs a job running slower than its bound. The moved job goes back to
// the queue having lost its work since its last checkpoint.

// introspecting reports whether this run observes pairs.
func (s *sim) introspecting() bool { return s.know != nil && !s.opts.NoIntrospection }

// nextObservation is when the next pair's progress becomes visible (+Inf:
// none waits to be seen).
func (s *sim) nextObservation() float64 {
	t := math.Inf(1)
	if !s.introspecting() {
		return t
	}
	for _, r := range s.run {
		if r.partner >= 0 && !r.seen {
			t = min(t, r.pairedAt+s.opts.ObserveAfter)
		}
	}
	return t
}

// observe records the progress of the pairs now visible and returns what
// the step sees of every paired job (Norm 0 for a pair not seen yet).
func (s *sim) observe() map[string]decide.Running {
	if !s.introspecting() {
		return nil
	}
	ids := make([]int, 0, len(s.run))
	for id, r := range s.run {
		if r.partner >= 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make(map[string]decide.Running, len(ids))
	for _, id := range ids {
		r := s.run[id]
		if !r.seen && s.now >= r.pairedAt+s.opts.ObserveAfter-1e-6 {
			r.seen = true
			p := s.run[r.partner]
			s.know.Observe(s.gpuModel(r.gpus[0]), s.profile(r.job), s.profile(p.job), r.rate/r.iso)
		}
		obs := decide.Running{Group: jobKey(id), Started: at(r.started)}
		if r.seen {
			obs.Norm = r.rate / r.iso
		}
		out[r.allocs[0]] = obs
	}
	return out
}

// unpair stops the job holding alloc and returns it to the queue with the
// work it has left plus what it loses: its work since its last checkpoint
// (or since it started, without checkpoints). The pair is remembered as
// incompatible on the GPU model.
func (s *sim) unpair(a decide.Action) int {
	id := s.allocJob[a.Allocs[0]]
	r := s.run[id]
	done := r.startRem - r.rem
	lost := done
	if ran := s.now - r.started; s.opts.Checkpoint > 0 && ran > 0 {
		lost = done * math.Mod(ran, s.opts.Checkpoint) / ran
	}
	s.left[id] = r.rem + lost
	r.out.Moves++
	r.out.Lost += lost / r.iso
	s.stop(id)
	if p := a.Pair; p != nil {
		s.know.MarkIncompatible(p.GPUModel, p.Slow, p.With)
	}
	return id
}

// stop takes running job id off the cluster.
func (s *sim) stop(id int) {
	r := s.run[id]
	for _, rep := range r.grown {
		s.dropReplica(id, rep)
	}
	for _, a := range r.allocs {
		if _, err := s.snap.Remove(a); err != nil {
			panic(err) // the simulator added it
		}
		delete(s.allocJob, a)
	}
	for _, g := range r.gpus {
		s.onGPU[g] = slices.DeleteFunc(s.onGPU[g], func(j int) bool { return j == id })
		if len(s.onGPU[g]) == 0 {
			delete(s.onGPU, g)
		}
	}
	delete(s.run, id)
}

// profile is job j's interference profile as the policies know it.
func (s *sim) profile(j Job) interference.Profile {
	p, _ := s.opts.Model.Lookup(j.Type)
	return p
}

// gpuModel is the model of the GPU with the given UUID.
func (s *sim) gpuModel(uuid string) string {
	n, _ := s.snap.Node(s.gpuNode[uuid])
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			return n.GPUs[i].Model
		}
	}
	return ""
}
