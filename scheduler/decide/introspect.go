package decide

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// Running is what the executor observed of an allocation that shares its
// GPU (Gandiva's introspection): the step checks it against the bound it
// was paired under.
type Running struct {
	Group Key
	// Started is when the allocation started: of two jobs to move, the
	// newer moves (it loses the least work).
	Started time.Time
	// Norm is its observed normalised throughput (progress rate while it
	// shares its GPU over its rate alone); 0 means not observed yet.
	Norm float64
	// Err is the observation's uncertainty: the step acts only when Norm
	// plus Err is still below the bound.
	Err float64
}

// introspect unpairs every shared GPU where a production job was observed
// running slower than its bound: it moves the lower-class job
// (opportunistic before production), else the newer one, and takes it out
// of the snapshot for the rest of the step so that its share is free.
func (st *step) introspect() []Action {
	ids := make([]string, 0, len(st.in.Running))
	for id, r := range st.in.Running {
		if r.Norm > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []Action
	done := map[string]bool{} // GPUs unpaired in this step
	for _, id := range ids {
		obs := st.in.Running[id]
		a, ok := st.snap.Alloc(id)
		if !ok || a.Class != placement.ClassProduction || a.Timeslice {
			continue // a time-sliced job is slower by its turns, not a pairing
		}
		bound := st.bound(a.MaxSlowdown)
		if 1-(obs.Norm+obs.Err) <= bound {
			continue
		}
		uuid, model, ok := st.snap.SoleGPU(id)
		if !ok || done[uuid] {
			continue
		}
		var others []string
		for _, o := range st.snap.OnGPU(uuid) {
			if o != id {
				others = append(others, o)
			}
		}
		if len(others) == 0 {
			continue // slow alone: not a pairing's fault
		}
		moved, movable := st.toMove(append([]string{id}, others...))
		if movable == 0 {
			continue
		}
		with := moved
		if moved == id {
			with = st.newest(others)
		}
		ma, _ := st.snap.Alloc(moved)
		wa, _ := st.snap.Alloc(with)
		pair := &Pair{GPUModel: model, Slow: a.Profile, With: wa.Profile, Norm: obs.Norm, Bound: bound}
		reason := fmt.Sprintf("%s runs at %.2fx of alone sharing GPU %s (%s) with %s, below its bound of %.2fx: moving %s (%s, %s)",
			st.label(id), obs.Norm, uuid, model, st.label(with), 1-bound, st.label(moved), classOf(ma), why(moved, id, movable))
		out = append(out, Action{Kind: Unpair, Group: st.in.Running[moved].Group, Allocs: []string{moved}, Reason: reason, Pair: pair})
		done[uuid] = true
		released := st.release([]string{moved})
		st.done = append(st.done, func() { st.restore(released) })
	}
	return append(out, st.unpairLosing(ids, done)...)
}

// unpairLosing unpairs every GPU shared by two observed allocations that
// declare their run times where observation says sharing loses: the two
// together, at their observed throughputs plus their errors, get less done
// than one of them alone (the GPU is worth less shared than not, to the
// whole queue), and by SJF-BSBF's rule (queue.PairGain) their summed
// completion times are longer shared than one after the other, even with
// the job to move waiting only for the other to end and counting the work
// it loses by moving (its work since it started). Pairing weighed the
// predictions; this weighs what was seen, so a pair the prediction was
// wrong about ends as soon as it is seen. A pair that still gets more
// done than one job alone is kept: the job moved would wait in the queue,
// longer than for its partner when the cluster is busy. ids are the
// observed allocations, sorted; done the GPUs already unpaired in this
// step.
func (st *step) unpairLosing(ids []string, done map[string]bool) []Action {
	var out []Action
	for _, id := range ids {
		uuid, model, ok := st.snap.SoleGPU(id)
		if a, _ := st.snap.Alloc(id); !ok || done[uuid] || a.Timeslice {
			continue // time-sliced jobs take turns: together they get a GPU's work done
		}
		on := st.snap.OnGPU(uuid)
		if len(on) != 2 {
			continue
		}
		other := on[0]
		if other == id {
			other = on[1]
		}
		oo, seen := st.in.Running[other]
		if !seen || oo.Norm <= 0 || !st.declared(id) || !st.declared(other) {
			continue
		}
		moved, movable := st.toMove([]string{id, other})
		if movable == 0 {
			continue
		}
		stay := id
		if moved == id {
			stay = other
		}
		ms, ss := st.in.Running[moved], st.in.Running[stay]
		nm, ns := min(ms.Norm+ms.Err, 1), min(ss.Norm+ss.Err, 1)
		tm, ts := st.left(moved).Seconds()*nm, st.left(stay).Seconds()*ns // alone
		lost := max(st.in.Now.Sub(ms.Started).Seconds(), 0) * nm
		if nm+ns >= 1 || queue.PairGain(ts, tm, ns, nm, math.Inf(1))+lost >= 0 {
			continue
		}
		slow, with := moved, stay
		if ss.Norm < ms.Norm {
			slow, with = stay, moved
		}
		sa, _ := st.snap.Alloc(slow)
		wa, _ := st.snap.Alloc(with)
		ma, _ := st.snap.Alloc(moved)
		pair := &Pair{GPUModel: model, Slow: sa.Profile, With: wa.Profile, Norm: st.in.Running[slow].Norm, Bound: st.bound(sa.MaxSlowdown)}
		reason := fmt.Sprintf("%s runs at %.2fx and %s at %.2fx of alone sharing GPU %s (%s): less done together than one alone, and slower, summed over both, than one after the other: moving %s (%s, %s)",
			st.label(stay), ss.Norm, st.label(moved), ms.Norm, uuid, model, st.label(moved), classOf(ma), why(moved, moved, movable))
		out = append(out, Action{Kind: Unpair, Group: ms.Group, Allocs: []string{moved}, Reason: reason, Pair: pair})
		done[uuid] = true
		released := st.release([]string{moved})
		st.done = append(st.done, func() { st.restore(released) })
	}
	return out
}

// label names an allocation by its group when the executor said it.
func (st *step) label(alloc string) string {
	if r, ok := st.in.Running[alloc]; ok {
		return r.Group.String()
	}
	return "allocation " + alloc
}

func why(moved, slow string, movable int) string {
	switch {
	case movable == 1 && moved == slow:
		return "the only one of them this scheduler may move"
	case movable == 1:
		return "the only one of them this scheduler may move, so the slow one runs alone"
	case moved == slow:
		return "the newer or lower-class of the two"
	}
	return "the newer or lower-class of the two, so the slow one runs alone"
}

func classOf(a placement.Alloc) string {
	if a.Class == "" {
		return "normal"
	}
	return string(a.Class)
}

// toMove chooses, of allocations sharing one GPU, the one to move:
// opportunistic before the rest, then the one started last; movable
// counts the candidates. Only an allocation the executor named a group for
// can be moved: one it did not (of a namespace it does not manage) is a
// neighbour, never stopped.
func (st *step) toMove(ids []string) (best string, movable int) {
	var bestA placement.Alloc
	for _, id := range ids {
		r, ok := st.in.Running[id]
		if !ok {
			continue
		}
		movable++
		a, _ := st.snap.Alloc(id)
		if best == "" {
			best, bestA = id, a
			continue
		}
		opp, bestOpp := a.Class == placement.ClassOpportunistic, bestA.Class == placement.ClassOpportunistic
		if opp != bestOpp {
			if opp {
				best, bestA = id, a
			}
			continue
		}
		if c := cmp.Or(r.Started.Compare(st.in.Running[best].Started), cmp.Compare(id, best)); c > 0 {
			best, bestA = id, a
		}
	}
	return best, movable
}

// newest is the allocation of ids started last (by ID among equals).
func (st *step) newest(ids []string) string {
	best := ids[0]
	for _, id := range ids[1:] {
		if cmp.Or(st.in.Running[id].Started.Compare(st.in.Running[best].Started), cmp.Compare(id, best)) > 0 {
			best = id
		}
	}
	return best
}

// bound is an allocation's slowdown bound: its own, else the configured
// default, else the snapshot's.
func (st *step) bound(own float64) float64 { return st.snap.Bound(own, st.cfg.MaxSlowdown) }
