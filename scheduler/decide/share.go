package decide

import (
	"fmt"
	"math"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// worthSharing keeps a decision that shares a GPU (no idle GPU was free)
// only when sharing beats waiting for a GPU of its own, by SJF-BSBF's rule
// (queue.PairGain) on the predicted throughputs, the group's expected run
// time and the expected ends of the jobs running: the partner's, and the
// soonest any GPU frees. Otherwise the group waits, with the reason.
func (st *step) worthSharing(req placement.Request, d *placement.Decision) *placement.Decision {
	if !d.Placed() || req.Count != 1 || len(d.Placements[0].GPUs) != 1 {
		return d
	}
	p := d.Placements[0]
	mates := st.snap.OnGPU(p.GPUs[0])
	if len(mates) == 0 {
		return d
	}
	tr := 0.0 // the partners' time left (the longest)
	for _, a := range mates {
		tr = max(tr, st.left(a).Seconds())
	}
	w := st.soonestFree()
	nj, nr := known(p.Predicted), known(p.PredictedMate)
	tj := st.expected(req).Seconds()
	if gain := queue.PairGain(tr, tj, nr, nj, w); gain > 0 {
		return d
	}
	return &placement.Decision{Request: d.Request, Policy: d.Policy, Refusal: &placement.Refusal{Code: placement.RefusedInterference,
		Message: fmt.Sprintf("sharing GPU %s (predicted %.2fx of alone, %.2fx for the job there) would take longer, summed over both jobs, than waiting about %s for a GPU of its own",
			p.GPUs[0], nj, nr, queue.Seconds(min(w, tr)).Round(time.Second))}}
}

// known is a predicted throughput, 1 when the policy predicted none.
func known(v float64) float64 {
	if v <= 0 {
		return 1
	}
	return v
}

// left is how long allocation id is expected to run from now; one that
// has overrun what was expected of it may need as long as a job of the
// default length.
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

// soonestFree is how long until the first busy GPU is expected to free
// (+Inf when none is busy), each allocation ending when left says. It is
// computed once per step and again after each placement.
func (st *step) soonestFree() float64 {
	if st.soonest != nil {
		return *st.soonest
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
	w := math.Inf(1)
	for _, l := range free {
		w = min(w, l.Seconds())
	}
	st.soonest = &w
	return w
}
