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

// Reservations (EASY backfilling): the first waiting multi-GPU group in
// the queue order that does not fit holds the nodes whose GPUs free first
// for it, by the expected ends of what runs there; groups behind it may use
// those nodes only if they expect to end before it could start. Without
// them a stream of small jobs keeps taking the GPUs a large job waits for
// (on the Gavel traces the reservation halves the average JCT). Expected
// ends are an input (Input.Ends): the service and the simulator derive
// them from declared run times and the work done (queue.Left; with exact
// run times the simulator's are the truth), and the step reads each
// through left.

// reserveFor returns the nodes held for request r (queue.Hold), each with
// the time its GPUs are expected to be free for one of r's allocations, or
// nil when r should not hold any: r needs fewer than two GPUs per
// allocation, the cluster lacks the nodes, or they would not free within
// r's own expected run time (unless r is past its wait bound: it holds
// them however long they take).
func (st *step) reserveFor(r placement.Request, overdue bool) map[string]time.Time {
	key := fmt.Sprintf("%d|%d|%s|%d%s|%t", r.Shares, r.Count, strings.Join(r.Models, ","), st.expected(r), allowedKey(r.Allowed), overdue)
	if st.rooms == nil {
		st.rooms = map[string]map[string]time.Time{}
	}
	if held, ok := st.rooms[key]; ok {
		return held
	}
	now := st.in.Now
	ends := st.gpuEnds()
	var allowed map[string]bool // the job's own rules (nil: every node)
	if r.Allowed != nil {
		allowed = make(map[string]bool, len(r.Allowed))
		for _, id := range r.Allowed {
			allowed[id] = true
		}
	}
	var rooms []queue.Room // in the snapshot's node order
	for _, n := range st.snap.Nodes() {
		if allowed != nil && !allowed[n.ID] {
			continue // Nomad would not place the group there
		}
		var free []time.Duration
		need := 0
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if g.Down || g.MIG() || (len(r.Models) > 0 && !slices.Contains(r.Models, g.Model)) {
				continue // a MIG instance never holds a multi-GPU allocation
			}
			need = (r.Shares + g.Shares - 1) / g.Shares
			free = append(free, max(ends[g.UUID].Sub(now), 0))
		}
		if in, ok := queue.RoomIn(free, need); ok && need >= 2 {
			rooms = append(rooms, queue.Room{Node: n.ID, In: in})
		}
	}
	var held map[string]time.Time
	within := st.expected(r)
	if overdue {
		within = time.Duration(math.MaxInt64)
	}
	if hold := queue.Hold(rooms, r.Count, within); hold != nil {
		held = map[string]time.Time{}
		for _, h := range hold {
			held[h.Node] = now.Add(h.In)
		}
	}
	st.rooms[key] = held
	return held
}

// gpuEnds returns when each busy GPU's last allocation is expected to end,
// each allocation ending when left says.
func (st *step) gpuEnds() map[string]time.Time {
	if st.gpuEnd != nil {
		return st.gpuEnd
	}
	st.gpuEnd = map[string]time.Time{}
	for _, a := range st.snap.Allocs() {
		end := st.in.Now.Add(st.left(a.ID))
		for _, sh := range a.Shares {
			if id, err := devicefn.ParseShareID(sh); err == nil {
				st.gpuEnd[id.UUID] = later(st.gpuEnd[id.UUID], end)
			}
		}
	}
	return st.gpuEnd
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// backfill returns the held nodes a group expected to run for d from now
// would delay, sorted.
func backfill(held map[string]time.Time, now time.Time, d time.Duration) []string {
	var out []string
	for n, at := range held {
		if now.Add(d).After(at) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// reservable reports whether a refusal is for capacity that frees with
// time, the only kind a reservation can wait out.
func reservable(d *placement.Decision) bool {
	return d.Refusal != nil && (d.Refusal.Code == placement.RefusedNoCapacity || d.Refusal.Code == placement.RefusedTopology)
}

// heldReason says how many nodes a waiting group holds and for how long.
func heldReason(held map[string]time.Time, now time.Time) string {
	last := now
	for _, at := range held {
		last = later(at, last)
	}
	return fmt.Sprintf("holds %d node(s) expected to free within %s", len(held), last.Sub(now).Round(time.Second))
}
