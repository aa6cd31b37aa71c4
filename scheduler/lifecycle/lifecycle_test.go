package lifecycle

import (
	"testing"

	"github.com/shoenig/test/must"
)

// runs, done, old and canary are allocations as Nomad reports them.
func runs(id string) Alloc    { return Alloc{ID: id, Live: true, Current: true, Reservable: true} }
func oldRuns(id string) Alloc { return Alloc{ID: id, Live: true, Reservable: true} }
func canary(id string) Alloc {
	return Alloc{ID: id, Live: true, Current: true, Canary: true, Reservable: true}
}
func completed(id string, current bool) Alloc { return Alloc{ID: id, Complete: true, Current: current} }
func lost(id string) Alloc                    { return Alloc{ID: id} } // lost, failed or stopped
// failedForGood failed, and Nomad will not reschedule it.
func failedForGood(id string, current bool) Alloc {
	return Alloc{ID: id, FailedForGood: true, Current: current}
}

// One row per lifecycle a placed job goes through in Nomad.
func TestReconcile(t *testing.T) {
	cases := []struct {
		name     string
		g        Group
		state    State
		do       Do
		replaces []string
		beside   bool
		missing  int
	}{
		{name: "periodic parent", g: Group{Template: true, Gated: true, Count: 1}, state: Template},
		{name: "gated parameterized parent: pinned to a pool for its children", g: Group{Template: true, Parameterized: true, Gated: true, Count: 1}, state: Template, do: Pool},
		{name: "ungated parameterized parent, adopted: pinned to a pool", g: Group{Template: true, Parameterized: true, Adoptable: true, Count: 1}, state: Template, do: Pool},
		{name: "parameterized parent pinned to a pool", g: Group{Template: true, Parameterized: true, Pinned: true, Adoptable: true, Count: 1}, state: Template},
		{name: "parameterized parent whose pool is gone: a new pool", g: Group{Template: true, Parameterized: true, Pinned: true, PinLost: true, Count: 1}, state: Template, do: Pool},
		{name: "parameterized parent whose pool is full while the cluster has room: a larger pool", g: Group{Template: true, Parameterized: true, Pinned: true, PoolFull: true, Count: 1}, state: Template, do: Pool},
		{name: "stopped parameterized parent whose pool is full: no pool", g: Group{Template: true, Parameterized: true, Pinned: true, PoolFull: true, Stopped: true, Count: 1}, state: Template},
		{name: "stopped parameterized parent: no pool", g: Group{Template: true, Parameterized: true, Gated: true, Stopped: true, Count: 1}, state: Template},
		{name: "dispatched child inside its parent's pool, placed", g: Group{Dispatched: true, Pinned: true, PinRoom: 1, Count: 1, Allocs: []Alloc{runs("a")}}, state: Running},
		{name: "dispatched child inside its parent's pool, waiting for room: never re-pinned", g: Group{Dispatched: true, Pinned: true, PinLost: true, NomadRefused: true, PinRoom: 1, Count: 2, Allocs: []Alloc{runs("a")}}, state: PinnedUnplaced, missing: 1},
		{name: "dispatched child of a parent gpushare did not pin: Nomad's", g: Group{Dispatched: true, Adoptable: true, NomadRefused: true, Count: 1}, state: Unmanaged, missing: 1},
		{name: "periodic child waits at its parent's gate", g: Group{Gated: true, Count: 1}, state: Waiting, do: Place, missing: 1},
		{name: "dispatched child at its parent's gate: Nomad refuses to register it again", g: Group{Gated: true, Dispatched: true, Count: 1}, state: Waiting, missing: 1},
		{name: "stopped job", g: Group{Stopped: true, Pinned: true, PinRoom: 1, Count: 1, Allocs: []Alloc{runs("a")}}, state: Stopped},
		{name: "scaled to zero", g: Group{Pinned: true, PinRoom: 1, Count: 0}, state: Stopped},
		{name: "new group at the gate", g: Group{Gated: true, Count: 2}, state: Waiting, do: Place, missing: 2},
		{name: "new version at the gate: the old allocations' shares are its own",
			g:     Group{Gated: true, Count: 2, Allocs: []Alloc{oldRuns("a"), oldRuns("b")}},
			state: Waiting, do: Place, replaces: []string{"a", "b"}},
		{name: "rolling update with max_parallel (no canary): replaced in place of the old",
			g:     Group{Gated: true, Count: 3, Canary: 0, Allocs: []Alloc{oldRuns("a"), oldRuns("b"), oldRuns("c")}},
			state: Waiting, do: Place, replaces: []string{"a", "b", "c"}},
		{name: "canary version at the gate: placed beside the running allocations",
			g:     Group{Gated: true, Count: 2, Canary: 1, Allocs: []Alloc{oldRuns("a"), oldRuns("b")}},
			state: Canarying, do: Place, beside: true},
		{name: "canary block on a first version: nothing to run beside",
			g:     Group{Gated: true, Count: 1, Canary: 1},
			state: Waiting, do: Place, missing: 1},
		{name: "canary block on a batch job is ignored, as Nomad ignores it",
			g:     Group{Gated: true, Batch: true, Count: 1, Canary: 1, Allocs: []Alloc{oldRuns("a")}},
			state: Waiting, do: Place, replaces: []string{"a"}},
		{name: "canaries running beside the old version, not promoted",
			g:     Group{Pinned: true, PinRoom: 2, Count: 1, Canary: 1, Allocs: []Alloc{oldRuns("a"), canary("c")}},
			state: Canarying},
		{name: "promoted: the old version is gone", g: Group{Pinned: true, PinRoom: 2, Count: 1, Allocs: []Alloc{runs("c")}}, state: Running},
		{name: "pinned, Nomad not placed yet", g: Group{Pinned: true, PinRoom: 1, Count: 1}, state: PinnedUnplaced, missing: 1},
		{name: "pinned, waiting for its shares to free", g: Group{Pinned: true, PinRoom: 2, Count: 2, Allocs: []Alloc{runs("a")}}, state: PinnedUnplaced, missing: 1},
		{name: "running", g: Group{Pinned: true, PinRoom: 2, Count: 2, Allocs: []Alloc{runs("a"), runs("b")}}, state: Running},
		{name: "scale up past the pin", g: Group{Pinned: true, PinRoom: 1, Count: 3, Allocs: []Alloc{runs("a")}},
			state: Scaling, do: Grow, replaces: []string{"a"}, missing: 2},
		{name: "scale up from zero allocations past the pin", g: Group{Pinned: true, PinRoom: 1, Count: 2},
			state: Scaling, do: Grow, missing: 2},
		{name: "scale down", g: Group{Pinned: true, PinRoom: 3, Count: 1, Allocs: []Alloc{runs("a")}}, state: Running},
		{name: "scale back up within the pin", g: Group{Pinned: true, PinRoom: 3, Count: 3, Allocs: []Alloc{runs("a")}},
			state: PinnedUnplaced, missing: 2},
		{name: "lost node: the pinned capacity is gone", g: Group{Pinned: true, PinRoom: 1, Count: 1, PinLost: true, Allocs: []Alloc{lost("a")}},
			state: Migrating, do: Repin, missing: 1},
		{name: "drained node: its allocations migrate; the new pin replaces the one that runs, and may take its shares",
			g:     Group{Pinned: true, PinRoom: 2, Count: 2, PinLost: true, Allocs: []Alloc{runs("a"), lost("b")}},
			state: Migrating, do: Repin, replaces: []string{"a"}, missing: 1},
		{name: "lost node of a group deployed with canaries: the new pin's canaries run beside the survivor",
			g:     Group{Pinned: true, PinRoom: 2, Count: 2, Canary: 1, PinLost: true, Allocs: []Alloc{runs("a"), lost("b")}},
			state: Migrating, do: Repin, missing: 1},
		{name: "drained node, nothing missing yet: Nomad migrates first", g: Group{Pinned: true, PinRoom: 1, Count: 1, PinLost: true, Allocs: []Alloc{runs("a")}},
			state: Running},
		{name: "Nomad refused the pin for a rule of its own", g: Group{Pinned: true, PinRoom: 1, Count: 1, NomadRefused: true},
			state: PinnedUnplaced, do: Repin, missing: 1},
		{name: "batch done", g: Group{Pinned: true, PinRoom: 1, Count: 1, Batch: true, Allocs: []Alloc{completed("a", true)}}, state: Done},
		{name: "batch run again: an older version's completion is ignored", g: Group{Gated: true, Count: 1, Batch: true, Allocs: []Alloc{completed("a", false)}},
			state: Waiting, do: Place, missing: 1},
		{name: "batch registered again unchanged after its run: not run again", g: Group{Gated: true, Count: 1, Batch: true, RanUnchanged: true,
			Allocs: []Alloc{completed("a", false)}}, state: Done},
		{name: "batch registered again: its last run's pin still to be read", g: Group{Gated: true, Count: 1, Batch: true, PriorUnread: true,
			Allocs: []Alloc{completed("a", false)}}, state: Waiting, missing: 1},
		{name: "batch run again, then its node lost", g: Group{Pinned: true, PinRoom: 1, Count: 1, Batch: true, PinLost: true,
			Allocs: []Alloc{completed("a", false), lost("b")}}, state: Migrating, do: Repin, missing: 1},
		// Nomad counts a completed allocation as one of the count and
		// places the rest: done only once all of it completed
		{name: "batch count 3, one done, two running: not done", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{completed("a", true), runs("b"), runs("c")}}, state: Running},
		{name: "batch count 3, one done, two not placed yet: still pinned for them", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{completed("a", true)}}, state: PinnedUnplaced, missing: 2},
		{name: "batch count 3, two done, one running", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{completed("a", true), completed("b", true), runs("c")}}, state: Running},
		{name: "batch count 3, all done", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{completed("a", true), completed("b", true), completed("c", true)}}, state: Done},
		{name: "batch count 3, one done, one failed: Nomad replaces the failed one", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{completed("a", true), lost("b"), runs("c")}}, state: PinnedUnplaced, missing: 1},
		{name: "batch count 3, one done, one lost with its node: placed again elsewhere", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true, PinLost: true,
			Allocs: []Alloc{completed("a", true), lost("b"), runs("c")}}, state: Migrating, do: Repin, replaces: []string{"c"}, missing: 1},
		{name: "batch count 2, one done of the version before: both run again", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true,
			Allocs: []Alloc{completed("a", false), runs("b")}}, state: PinnedUnplaced, missing: 1},
		{name: "batch scaled down below what completed: done", g: Group{Pinned: true, PinRoom: 3, Count: 1, Batch: true,
			Allocs: []Alloc{completed("a", true), completed("b", true)}}, state: Done},
		// a failed allocation Nomad will not reschedule (attempts used
		// up, or rescheduling disabled) is one of the count, as Nomad
		// counts it; one it still reschedules is missing
		{name: "batch count 2, one done, one failed for good: done", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true,
			Allocs: []Alloc{completed("a", true), failedForGood("b", true)}}, state: Done},
		{name: "batch count 2, one done, one failed with an attempt left: still pinned for it", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true,
			Allocs: []Alloc{completed("a", true), lost("b")}}, state: PinnedUnplaced, missing: 1},
		{name: "batch count 2, both failed for good: done", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true,
			Allocs: []Alloc{failedForGood("a", true), failedForGood("b", true)}}, state: Done},
		{name: "batch count 3, one failed for good, one running: running", g: Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
			Allocs: []Alloc{failedForGood("a", true), completed("b", true), runs("c")}}, state: Running},
		{name: "batch count 2, one failed for good of the version before: ignored", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true,
			Allocs: []Alloc{failedForGood("a", false), runs("b")}}, state: PinnedUnplaced, missing: 1},
		{name: "batch count 2, one failed for good, its node lost: not placed again", g: Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true, PinLost: true,
			Allocs: []Alloc{failedForGood("a", true), runs("b")}}, state: Running},
		{name: "ungated, not adopted", g: Group{Count: 1, Allocs: []Alloc{runs("a")}}, state: Unmanaged},
		{name: "ungated with shares over two GPUs: adopted", g: Group{Count: 1, Adoptable: true, Allocs: []Alloc{{ID: "a", Live: true, Current: true}}},
			state: Migrating, do: Adopt, replaces: []string{"a"}},
		{name: "ungated, Nomad could not place it: adopted", g: Group{Count: 1, Adoptable: true, NomadRefused: true}, state: Waiting, do: Adopt, missing: 1},
		{name: "ungated, Nomad not evaluated yet: left to Nomad", g: Group{Count: 1, Adoptable: true}, state: Unmanaged, missing: 1},
		{name: "ungated, running on valid shares with one to place: left to Nomad", g: Group{Count: 2, Adoptable: true, NomadRefused: true, Allocs: []Alloc{runs("a")}},
			state: Unmanaged, missing: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Reconcile(c.g)
			must.Eq(t, c.state, r.State)
			must.Eq(t, c.do, r.Do, must.Sprintf("did %s", r.Do))
			must.Eq(t, c.replaces, r.Replaces)
			must.Eq(t, c.beside, r.Beside)
			if c.state != Done && c.state != Template && c.state != Stopped && c.state != Canarying && c.state != Running {
				must.Eq(t, c.missing, r.Missing)
			}
			must.NotEq(t, "", r.Why)
		})
	}
}

// A batch group done with failed allocations says how many completed and
// how many failed for good; one done by completions alone says so.
func TestBatchDoneSaysHowItsAllocationsEnded(t *testing.T) {
	r := Reconcile(Group{Pinned: true, PinRoom: 3, Count: 3, Batch: true,
		Allocs: []Alloc{completed("a", true), completed("b", true), failedForGood("c", true)}})
	must.Eq(t, Done, r.State)
	must.StrContains(t, r.Why, "2 completed and 1 failed with no reschedule left")
	r = Reconcile(Group{Pinned: true, PinRoom: 2, Count: 2, Batch: true, Allocs: []Alloc{completed("a", true), completed("b", true)}})
	must.Eq(t, "a batch group: all 2 allocation(s) of this version completed", r.Why)
}

// The answer depends on the facts alone, not on the order Nomad lists
// allocations in.
func TestReconcileIsPure(t *testing.T) {
	g := Group{Pinned: true, PinRoom: 1, Count: 3, Allocs: []Alloc{runs("a"), lost("x"), completed("y", false)}}
	first := Reconcile(g)
	g.Allocs = []Alloc{completed("y", false), lost("x"), runs("a")}
	must.Eq(t, first, Reconcile(g))
	must.Eq(t, first, Reconcile(g))
}

// A gated group's answer never reads Adoptable (the service does not work
// it out for gated groups, whose tasks it then need not read): over every
// combination of the other facts, with no allocation, one running of this
// version or of the one before, a canary, one Nomad refused, one complete.
func TestAGatedGroupsAnswerDoesNotReadAdoptable(t *testing.T) {
	allocs := [][]Alloc{nil, {runs("a")}, {{ID: "o", Live: true, Reservable: true}}, {{ID: "c", Live: true, Current: true, Canary: true, Reservable: true}},
		{{ID: "bad", Live: true, Current: true}}, {completed("y", true)}}
	checked := 0
	for bits := range 1 << 11 {
		on := func(i int) bool { return bits&(1<<i) != 0 }
		for _, as := range allocs {
			for count := range 3 {
				g := Group{Gated: true, Template: on(0), Parameterized: on(1), Stopped: on(2), Batch: on(3), Dispatched: on(4),
					RanUnchanged: on(5), PriorUnread: on(6), Pinned: on(7), PinLost: on(8), NomadRefused: on(9), Canary: bits >> 10,
					Count: count, PinRoom: count, Allocs: as}
				adopted := g
				adopted.Adoptable = true
				must.Eq(t, Reconcile(g), Reconcile(adopted), must.Sprintf("%+v", g))
				checked++
			}
		}
	}
	must.Eq(t, (1<<11)*6*3, checked)
}
