package placement

import "fmt"

// Time-slicing (Gandiva's suspend/resume; issue 46 part 2). A time-sliced
// allocation (Request.Timeslice) asks shares for its GPU memory; its
// compute is not capped at them: the time-sliced allocations of one GPU
// pool their caps and take the pool in turns, one quantum each, suspended
// (their memory kept) out of turn. So they never run at once, and the
// placement core keeps them apart from every other kind:
//
//   - a time-sliced allocation goes only on a GPU that holds no allocation
//     that is not time-sliced, and a GPU that holds a time-sliced one
//     takes no other kind (a capped job beside them would run beside each
//     of them in turn, and the pool would be no GPU's to give);
//   - at most Options.TimesliceMaxPerGPU of them share one GPU (each runs
//     about 1/n of the time when all are busy);
//   - their shares must fit the GPU's free shares, as any fraction's do
//     (the memory of all of them stays on the GPU);
//   - the interference model does not apply to them: they are predicted
//     to run as alone while in turn.
//
// Jobs that each want the whole GPU's compute but a fraction of its
// memory so share one GPU in turns instead of queueing for one each.

// DefaultTimesliceMaxPerGPU is the most time-sliced allocations one GPU
// takes when Options.TimesliceMaxPerGPU is 0 (config timeslice.max_per_gpu
// defaults to the same).
const DefaultTimesliceMaxPerGPU = 4

// Timesliced is the number of time-sliced allocations on the GPU.
func (g *GPU) Timesliced() int { return g.ts }

// timesliceRoom reports whether g may take an allocation of r under the
// rules above (its free shares are checked by the caller).
func (e *engine) timesliceRoom(g *GPU, r *Request) bool {
	if !r.Timeslice {
		return g.ts == 0
	}
	return g.ts == len(g.allocs) && g.ts < e.opts.TimesliceMaxPerGPU
}

// timesliceKind reports whether g holds only allocations of r's kind
// (time-sliced or not), the rule Prefer keeps when a group stays on its
// GPU.
func timesliceKind(g *GPU, r *Request) bool {
	if r.Timeslice {
		return g.ts == len(g.allocs)
	}
	return g.ts == 0
}

// timesliceNote explains a refusal where n nodes had free shares only on
// GPUs the time-slicing rules keep r off.
func (e *engine) timesliceNote(r *Request, frac, n int) string {
	if r.Timeslice {
		return fmt.Sprintf("needs %d shares on one GPU that holds only time-sliced allocations, fewer than %d of them; "+
			"on %d node(s) the GPUs with room hold allocations that are not time-sliced or already %d time-sliced ones "+
			"(a time-sliced job shares its GPU only with time-sliced jobs)", frac, e.opts.TimesliceMaxPerGPU, n, e.opts.TimesliceMaxPerGPU)
	}
	return fmt.Sprintf("needs %d shares on one GPU; on %d node(s) the GPUs with room hold time-sliced allocations, "+
		"which share their GPU with no job that is not time-sliced (set gpushare.timeslice = \"true\" to take turns with them)", frac, n)
}
