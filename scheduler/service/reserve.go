package service

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// Reservations (EASY backfilling): the first waiting multi-GPU group in
// the queue order that does not fit holds the nodes whose GPUs free first
// for it, by the expected run times of what runs there; groups behind it
// may use those nodes only if they expect to end before it could start.
// Without them a stream of small jobs keeps taking the GPUs a large job
// waits for (on the Gavel traces the reservation halves the average JCT;
// docs/results). Run times are what jobs declare in gpushare.expected_runtime,
// else default_expected_runtime; nothing is enforced, so a job that runs
// longer than it said delays the reservation, which is recomputed on every
// pass.

// expectedOf is a request's expected run time: declared, else def.
func expectedOf(r placement.Request, def time.Duration) time.Duration {
	if r.Expected > 0 {
		return r.Expected
	}
	return def
}

// expectedEnds returns when each allocation of the snapshot is expected to
// end: its creation time plus its group's expected run time, or now plus
// that for the holds of pinned groups not yet allocated; never before now
// (an overdue job may end at any moment). The caller holds s.mu.
func (s *Service) expectedEnds(snap *placement.Snapshot, now time.Time, def time.Duration) map[string]time.Time {
	expected := map[string]time.Duration{} // request ID (pin.GroupKey) -> expected run time
	for _, job := range s.state.Jobs {
		for _, tg := range job.TaskGroups {
			if r, err := s.state.Request(job, *tg.Name, s.profile); err == nil {
				expected[r.ID] = expectedOf(r, def)
			}
		}
	}
	ends := map[string]time.Time{}
	for _, a := range snap.Allocs() {
		end := now.Add(def)
		if rest, ok := strings.CutPrefix(a.ID, model.PendingPrefix); ok {
			if at := strings.LastIndexByte(rest, '@'); at >= 0 {
				if d, ok := expected[rest[:at]]; ok {
					end = now.Add(d)
				}
			}
		} else if al, ok := s.state.Allocs[a.ID]; ok {
			d := def
			if job := s.state.Jobs[model.JobKey(al.Namespace, al.JobID)]; job != nil {
				if e, ok := expected[pin.GroupKey(job, al.TaskGroup)]; ok {
					d = e
				}
			}
			if al.CreateTime > 0 {
				end = time.Unix(0, al.CreateTime).Add(d)
			}
		}
		ends[a.ID] = later(end, now)
	}
	return ends
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// reserveFor returns the nodes held for request r (queue.Hold), each with
// the time its GPUs are expected to be free for one of r's allocations, or
// nil when r should not hold any: r needs fewer than two GPUs per
// allocation, the cluster lacks the nodes, or they would not free within
// r's own expected run time.
func reserveFor(snap *placement.Snapshot, r placement.Request, ends map[string]time.Time, now time.Time, def time.Duration) map[string]time.Time {
	gpuEnd := map[string]time.Time{} // GPU UUID -> when its last allocation ends
	for _, a := range snap.Allocs() {
		end, ok := ends[a.ID]
		if !ok {
			end = now.Add(def) // placed after ends was made
		}
		for _, sh := range a.Shares {
			if id, err := devicefn.ParseShareID(sh); err == nil {
				gpuEnd[id.UUID] = later(gpuEnd[id.UUID], end)
			}
		}
	}
	var rooms []queue.Room // in the snapshot's node order
	for _, n := range snap.Nodes() {
		var free []time.Duration
		need := 0
		for _, g := range n.GPUs {
			if g.Down || (len(r.Models) > 0 && !slices.Contains(r.Models, g.Model)) {
				continue
			}
			need = (r.Shares + g.Shares - 1) / g.Shares
			free = append(free, max(gpuEnd[g.UUID].Sub(now), 0))
		}
		if in, ok := queue.RoomIn(free, need); ok && need >= 2 {
			rooms = append(rooms, queue.Room{Node: n.ID, In: in})
		}
	}
	hold := queue.Hold(rooms, r.Count, expectedOf(r, def))
	if hold == nil {
		return nil
	}
	held := map[string]time.Time{}
	for _, h := range hold {
		held[h.Node] = now.Add(h.In)
	}
	return held
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
