package decide

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// worthSharing keeps a decision that shares a GPU (no idle GPU was free)
// only when sharing beats waiting for a GPU of its own, by SJF-BSBF's rule
// (queue.PairGain) on the predicted throughputs, the group's expected run
// time and the expected ends of the jobs running: the partner's, and when
// a GPU would free for this group behind those waiting ahead of it.
// Otherwise the group waits, with the reason. The rule needs run times:
// when the group or a job on the GPU declares none, the decision stands.
//
// The decision must stay right when the prediction is wrong. The gain is
// weighed at the predictions, which are the expected throughputs (the
// model corrected by what was observed on this GPU model, see
// interference.Knowledge): a pairing the prediction was wrong about costs
// no more than the time until introspection sees it and unpairs it (see
// unpairLosing). But the group itself must not end later sharing than
// waiting for a GPU of its own and running alone, even at the throughputs
// one uncertainty below the predictions (the placement's PredictedErr and
// PredictedMateErr: the model's error learned on this GPU model, which
// shrinks as the pair or its jobs are observed there): no job is paired
// whose pessimistic tail exceeds not sharing.
//
// A time-sliced group (placement.Request.Timeslice) is not weighed: it
// takes turns with the GPU's time-sliced jobs rather than run beside
// them, and opted in to share rather than wait.
func (st *step) worthSharing(req placement.Request, d *placement.Decision) *placement.Decision {
	if !d.Placed() || req.Count != 1 || len(d.Placements[0].GPUs) != 1 || req.Timeslice {
		return d
	}
	p := d.Placements[0]
	mates := st.snap.OnGPU(p.GPUs[0])
	if len(mates) == 0 {
		return d
	}
	if req.Expected <= 0 {
		return d // no run time declared: nothing to weigh waiting against
	}
	tr := 0.0 // the partners' time left (the longest)
	for _, a := range mates {
		if !st.declared(a) {
			return d
		}
		tr = max(tr, st.left(a).Seconds())
	}
	w := st.waitFor()
	nj, nr := known(p.Predicted), known(p.PredictedMate)
	tj := st.expected(req).Seconds()
	gain := queue.PairGain(tr, tj, nr, nj, w)
	lj, lr := pessimistic(p.Predicted, p.PredictedErr), pessimistic(p.PredictedMate, p.PredictedMateErr)
	worst, alone := queue.SharedFinish(tr, tj, lr, lj), min(w, tr)+tj
	if gain > 0 && worst <= alone {
		return d
	}
	if gain > 0 && st.cfg.ObserveWithin > 0 && gain > st.badPairCost(tr, tj, lr, lj, w) {
		return d // a wrong prediction costs no more than introspection lets it
	}
	why := fmt.Sprintf("take longer, summed over both jobs, than waiting about %s for a GPU of its own", queue.Seconds(min(w, tr)).Round(time.Second))
	if gain > 0 {
		why = fmt.Sprintf("end it in about %s at worst (%.2fx of alone within the prediction's uncertainty), later than waiting about %s for a GPU of its own and running alone",
			queue.Seconds(worst).Round(time.Second), lj, queue.Seconds(min(w, tr)).Round(time.Second))
	}
	return &placement.Decision{Request: d.Request, Policy: d.Policy, Refusal: &placement.Refusal{Code: placement.RefusedInterference,
		Message: fmt.Sprintf("sharing GPU %s (predicted %.2fx of alone, %.2fx for the job there) would %s", p.GPUs[0], nj, nr, why)}}
}

// badPairCost is what a pairing costs, summed over both jobs, when the
// throughputs are one uncertainty below the predictions (lr, lj), given
// that introspection sees the pair within ObserveWithin and unpairs it
// if it loses: the smaller of the pessimistic pair's own loss against
// waiting, and the observation window's: the partner slowed to lr for
// the window, and the job, moved back to the queue having lost its work,
// starting no earlier than the window's end instead of when a GPU would
// have freed for it.
func (st *step) badPairCost(tr, tj, lr, lj, w float64) float64 {
	loss := -queue.PairGain(tr, tj, lr, lj, w)
	if loss <= 0 {
		return 0
	}
	o := st.cfg.ObserveWithin.Seconds()
	window := o*(1-min(lr, 1)) + max(0, o-min(w, tr))
	return min(loss, window)
}

// pessimistic is a predicted throughput one uncertainty lower (1 when the
// policy predicted none), never below a hundredth.
func pessimistic(v, err float64) float64 {
	return max(known(v)-max(err, 0), 0.01)
}

// known is a predicted throughput, 1 when the policy predicted none.
func known(v float64) float64 {
	if v <= 0 {
		return 1
	}
	return v
}

// left is how long allocation id is expected to run from now, the one
// rule of a running allocation's end that holds (gpuEnds) and the rule
// that sharing must beat waiting both read. An end not after now was
// declared wrong (the service and the simulator pass queue.Left's, never
// past: they know how long a job ran); all the step knows then is that the
// job is late, and it takes the default length, as for an allocation that
// declared none, rather than "any moment", which would hold GPUs idle for
// it.
func (st *step) left(id string) time.Duration {
	end, ok := st.ends[id]
	if !ok {
		end, ok = st.in.Ends[id]
	}
	if !ok || !end.After(st.in.Now) {
		return st.cfg.DefaultExpected
	}
	return end.Sub(st.in.Now)
}

// freeAt is how long until each busy GPU is expected to free, soonest
// first, each allocation ending when left says. It is computed once per
// step and again after each change to the snapshot.
func (st *step) freeAt() []float64 {
	if st.frees != nil {
		return st.frees
	}
	free := map[string]time.Duration{}
	for _, a := range st.snap.Allocs() {
		l := st.left(a.ID)
		for _, sh := range a.Shares {
			if id, err := devicefn.ParseShareID(sh); err == nil {
				free[id.UUID] = max(free[id.UUID], l)
			}
		}
	}
	st.frees = make([]float64, 0, len(free))
	for _, l := range free {
		st.frees = append(st.frees, l.Seconds())
	}
	slices.Sort(st.frees)
	return st.frees
}

// waitFor is how long a group that waits now would wait for a GPU of its
// own: the groups already waiting ahead of it in this step take the GPUs
// that free first.
func (st *step) waitFor() float64 {
	fr := st.freeAt()
	if st.ahead < len(fr) {
		return fr[st.ahead]
	}
	return math.Inf(1)
}

// declared reports whether allocation id's end comes from a declared run
// time (placed in this step by a group that declared one, or listed in
// Ends).
func (st *step) declared(id string) bool {
	if _, ok := st.ends[id]; ok {
		return st.placedDeclared[id]
	}
	_, ok := st.in.Ends[id]
	return ok
}

// compatible reports whether group g may share the given GPUs with what
// runs there (partnerOK), or why not: the caller's Compatible refuses, or
// an allocation there is past MaxStretch. A time-sliced allocation is
// never past it: it is slower by its turns, which it opted into, not by a
// pairing (as introspection never unpairs it).
func (st *step) compatible(g Key, gpus []string) int {
	for _, u := range gpus {
		for _, a := range st.snap.OnGPU(u) {
			if st.in.Compatible != nil && !st.in.Compatible(g, a) {
				return partnerForbidden
			}
			if st.cfg.MaxStretch > 0 && st.in.Stretched[a] > st.cfg.MaxStretch && !st.timesliced(a) {
				return partnerStretched // sharing has cost it enough already
			}
		}
	}
	return partnerOK
}

// Why a group may not share a GPU with what runs there (compatible).
const (
	partnerOK        = iota
	partnerForbidden // the caller's Compatible
	partnerStretched // past MaxStretch
)

// steeredRefusal adds to a capacity refusal the nodes place steered the
// group away from for the jobs on their GPUs (steered: by Compatible, by
// MaxStretch), which the core counts only as nodes the request avoids.
func steeredRefusal(d *placement.Decision, steered [2]int, maxStretch float64) *placement.Decision {
	if d.Placed() || d.Refusal == nil || d.Refusal.Code != placement.RefusedNoCapacity || steered[0]+steered[1] == 0 {
		return d
	}
	var why []string
	if n := steered[1]; n > 0 {
		why = append(why, fmt.Sprintf("on %d node(s) a GPU has room, but sharing has already cost the job there more than max_stretch (%.0f%%) of its run time alone", n, 100*maxStretch))
	}
	if n := steered[0]; n > 0 {
		why = append(why, fmt.Sprintf("on %d node(s) a GPU has room, but the job there may not share a GPU with this one", n))
	}
	out := *d
	out.Refusal = &placement.Refusal{Code: d.Refusal.Code, Message: d.Refusal.Message + "; " + strings.Join(why, "; ")}
	return &out
}

// timesliced reports whether allocation id of the snapshot is time-sliced.
func (st *step) timesliced(id string) bool {
	a, ok := st.snap.Alloc(id)
	return ok && a.Timeslice
}
