package lifecycle

import "fmt"

// State is where a group stands in its job's life.
type State string

// The states of a group, as the API and `gpushare job status` name them.
const (
	// Template: a periodic or parameterized parent. Nomad never places
	// it; its launched or dispatched children are groups of their own.
	Template State = "template"
	// Stopped: the job is stopped, or the group scaled to zero.
	Stopped State = "stopped"
	// Waiting: the group waits at the gate for gpushare to place it.
	Waiting State = "waiting"
	// PinnedUnplaced: pinned, with fewer allocations than it asks for.
	PinnedUnplaced State = "pinned-unplaced"
	// Running: every allocation it asks for runs.
	Running State = "running"
	// Scaling: its count grew past what its pin has room for.
	Scaling State = "scaling"
	// Canarying: a new version's canaries run, or are to run, beside the
	// allocations of the version they replace.
	Canarying State = "canarying"
	// Migrating: allocations must leave the capacity they were pinned to
	// (a node down, drained or gone, a GPU lost, shares taken).
	Migrating State = "migrating"
	// Done: a batch group every allocation of whose count ended in the
	// current version, completed or failed with no reschedule left:
	// nothing of it is missing and nothing runs.
	Done State = "done"
	// Unmanaged: not gpushare's to place (no gate, no pin, nothing to
	// adopt): Nomad alone places it.
	Unmanaged State = "not-gpushare"
)

// Do is the one thing gpushare must do for a group.
type Do int

const (
	// Nothing: Nomad does the rest, or there is nothing to do.
	Nothing Do = iota
	// Place: decide the group's placement and pin it (a gated group).
	Place
	// Repin: the pinned capacity is gone; decide again elsewhere.
	Repin
	// Grow: the group scaled past its pin; decide it again for its new
	// count.
	Grow
	// Adopt: an ungated group Nomad cannot run as placed; decide it.
	Adopt
	// Pool: pin a parameterized parent to a pool of GPUs inside which
	// Nomad places each dispatched child (placement.Snapshot.Pool):
	// Nomad refuses every registration of a dispatched job, so a child
	// runs where its parent's constraints let Nomad put it. A pinned
	// parent whose pool is full is pinned to a larger one: each child is
	// a copy of its parent made when it is dispatched, so only children
	// dispatched from then on see it, and nothing that runs restarts.
	Pool
)

func (d Do) String() string {
	switch d {
	case Place:
		return "place"
	case Repin:
		return "repin"
	case Grow:
		return "grow"
	case Adopt:
		return "adopt"
	case Pool:
		return "pool"
	}
	return "nothing"
}

// Alloc is one allocation of the group, of any version, as Nomad reports
// it.
type Alloc struct {
	ID string
	// Live: it holds resources (not terminal on the client, desired to run).
	Live bool
	// Complete: it ended successfully (Nomad's client status complete).
	// A batch allocation that failed, or was lost with its node, is not:
	// Nomad replaces it (reschedules it, or places it again).
	Complete bool
	// FailedForGood: a batch allocation that failed and that Nomad will
	// not reschedule (its reschedule policy disabled, its attempts used
	// up within the interval: model.FailedForGood). Nomad's reconciler
	// counts it among the count and places nothing for it. One already
	// replaced is not: its replacement is what counts.
	FailedForGood bool
	// Current: it runs the group's current job version (placed, or updated
	// in place, after that version was registered).
	Current bool
	// Canary: a canary of a deployment that is not promoted yet.
	Canary bool
	// Reservable: the plugin's Reserve accepts the shares it holds (one
	// allocation's worth; a fraction on one GPU).
	Reservable bool
}

// Group is what gpushare reads of one group each pass.
type Group struct {
	// Template: the job is a periodic parent or a parameterized one that is
	// not a dispatched child.
	Template bool
	// Parameterized: the template is a parameterized job (its children
	// are dispatched, and can never be registered again).
	Parameterized bool
	// Stopped: the job is stopped.
	Stopped bool
	// Batch: a batch or sysbatch job, whose allocations end.
	Batch bool
	// Count is how many allocations the group asks for.
	Count int
	// Canary is the update block's canary count (service jobs).
	Canary int
	// Gated: the group carries the gate.
	Gated bool
	// Dispatched: the job is a dispatched child of a parameterized job.
	// Nomad's HTTP API does not carry a job's Dispatched flag on
	// registration, and its validation requires it unchanged, so such a
	// job can never be registered again: never pinned.
	Dispatched bool
	// RanUnchanged: a batch group registered again at the gate after its
	// last run ended (every allocation of its count completed, or failed
	// with no reschedule left), unchanged since that run's pinned version
	// (the same request and the same spec, pin.Spec): a pipeline applying
	// the same file. Nomad alone makes no new version of an unchanged job,
	// so it would not run it again.
	RanUnchanged bool
	// PriorUnread: a batch group at the gate whose last run ended, and
	// the pin that run was placed with is still to be read (a
	// scheduler that started since): whether it changed is not known yet.
	PriorUnread bool
	// Pinned: it carries a trusted pin of this incarnation of the job.
	Pinned bool
	// PoolFull: a parameterized parent's pool has no room left for
	// another child on any of its nodes, while the nodes its rules allow
	// have room the pool does not name (a node added since it was pinned,
	// another GPU of one of its nodes).
	PoolFull bool
	// PinRoom is how many allocations the pin names shares for.
	PinRoom int
	// NodePin: the pin names only nodes (pin.ContractNode), which Nomad
	// checks in place: pinned again, the allocations on nodes it keeps
	// stay as they run.
	NodePin bool
	// PinLost: the capacity the pin names is gone for its missing
	// allocations (a node down, drained or gone, a GPU unhealthy, shares
	// another allocation took, a node the job's rules no longer allow).
	PinLost bool
	// NomadRefused: Nomad evaluated the current version and could not
	// place it for a reason other than waiting for shares the pin holds.
	NomadRefused bool
	// Adoptable: the operator adopts ungated groups (adopt_ungated), and
	// this one is ungated and asks for gpushare shares (a gated group's
	// answer never reads it).
	Adoptable bool
	// Allocs are its allocations, of every version.
	Allocs []Alloc
}

// Result is the group's state and what to do.
type Result struct {
	State State
	Do    Do
	// Replaces are live allocations whose shares the decision may take:
	// Nomad stops them in the plan that places their replacements.
	Replaces []string
	// Beside: the decision must leave the running allocations their
	// shares, for Nomad places the new version beside them (canaries).
	Beside bool
	// Missing is how many allocations Nomad has yet to place.
	Missing int
	// Why says, in a user's words, why the group is in its state.
	Why string
}

// Reconcile is where g stands and what gpushare must do for it. It is
// pure: the same facts give the same answer.
func Reconcile(g Group) Result {
	switch {
	case g.Template && g.Parameterized && !g.Stopped && g.Count > 0 && (g.Gated || (g.Adoptable && !g.Pinned) || (g.Pinned && (g.PinLost || g.PoolFull))):
		r := Result{State: Template, Do: Pool}
		switch {
		case g.Gated || !g.Pinned:
			r.Why = "a parameterized job: pinned to a pool of GPUs, one allocation's worth per node its rules allow, inside which Nomad places each dispatched child (Nomad refuses every registration of a dispatched job, so a child cannot be pinned itself)"
		case g.PinLost:
			r.Why = "a parameterized job whose pool of GPUs is gone (its nodes down, drained or gone): pinned to a new pool for the children dispatched from now on"
		default:
			r.Why = "a parameterized job whose pool of GPUs has no room left for another child, while the nodes its rules allow have room it does not name (a node added since, another GPU of one of its nodes): its pool grows for the children dispatched from now on; those dispatched before keep theirs, and nothing that runs restarts"
		}
		return r
	case g.Template && g.Parameterized && g.Pinned:
		return Result{State: Template, Why: "a parameterized job pinned to a pool of GPUs: Nomad places each dispatched child inside it"}
	case g.Template:
		return Result{State: Template, Why: "a periodic or parameterized job: Nomad never places it; its children are placed as they are launched"}
	case g.Stopped:
		return Result{State: Stopped, Why: "the job is stopped"}
	case g.Count <= 0:
		return Result{State: Stopped, Why: "scaled to zero"}
	}
	var live, old []string
	liveCurrent, complete, failed, canaries := 0, 0, 0, 0
	invalid := false
	for _, a := range g.Allocs {
		switch {
		case a.Live:
			live = append(live, a.ID)
			if a.Current {
				liveCurrent++
				if a.Canary {
					canaries++
				}
			} else {
				old = append(old, a.ID)
			}
			if !a.Reservable {
				invalid = true
			}
		case a.Complete && a.Current:
			// terminal allocations of older versions are ignored, as
			// Nomad's reconciler ignores them for batch jobs
			complete++
		case a.FailedForGood && a.Current:
			failed++
		}
	}
	missing := max(g.Count-len(live), 0)
	if g.Batch {
		// a completed allocation of this version is one of the count,
		// as Nomad's reconciler counts it (among the untainted), and so
		// is a failed one it will not reschedule: Nomad places the rest,
		// so the group is done only once nothing of its count is missing
		// and nothing of it runs
		missing = max(g.Count-len(live)-complete-failed, 0)
		if complete+failed > 0 && missing == 0 && len(live) == 0 {
			why := fmt.Sprintf("a batch group: all %d allocation(s) of this version completed", complete)
			if failed > 0 {
				why = fmt.Sprintf("a batch group: every allocation of this version ended, %d completed and %d failed with no reschedule left (its reschedule policy's attempts used up, or none): Nomad places none of them again", complete, failed)
			}
			return Result{State: Done, Why: why}
		}
	}
	r := Result{Missing: missing}
	switch {
	case g.Gated && g.Batch && len(live) == 0 && g.RanUnchanged:
		r.State, r.Missing = Done, 0
		r.Why = "registered again unchanged after its run ended (every allocation completed, or failed with no reschedule left): Nomad alone would not run it again (an unchanged job makes no new version), so gpushare leaves it at the gate; change the job (a meta value) to run it again"
		return r
	case g.Gated && g.Batch && len(live) == 0 && g.PriorUnread:
		r.State = Waiting
		r.Why = "reading the pin its last run was placed with, to tell whether it changed since"
		return r
	case g.Gated && g.Dispatched:
		r.State = Waiting
		r.Why = "dispatched while its parameterized parent still waited at the gate (before gpushare pinned the parent to a pool of GPUs): Nomad (1.11) refuses every registration of a dispatched job, so gpushare cannot pin it; stop it and dispatch it again (the parent is pinned now, or once a scheduler runs)"
		return r
	case g.Dispatched && g.Pinned:
		if missing == 0 {
			r.State, r.Why = Running, fmt.Sprintf("a dispatched child: all %d allocation(s) run, where Nomad placed them inside its parent's pool of GPUs", len(live))
			return r
		}
		r.State = PinnedUnplaced
		r.Why = fmt.Sprintf("a dispatched child: Nomad places its %d allocation(s) inside its parent's pool of GPUs, and waits for room there (the pool's GPUs are busy, or its nodes take no work)", missing)
		return r
	case g.Dispatched:
		r.State = Unmanaged
		r.Why = "a dispatched child of a parameterized job gpushare did not pin: Nomad alone places it (gpushare cannot register a dispatched job)"
		return r
	case g.Gated:
		r.State, r.Do = Waiting, Place
		if g.Canary > 0 && !g.Batch && len(live) > 0 {
			// Nomad places canaries beside the allocations they replace:
			// the new version needs shares of its own
			r.State, r.Beside = Canarying, true
			r.Why = fmt.Sprintf("a new version with %d canary(ies): placed beside the %d running allocation(s), which keep their shares until the deployment is promoted", g.Canary, len(live))
			return r
		}
		r.Replaces = live
		r.Why = "waits at the gate for gpushare to place it"
		if len(live) > 0 {
			r.Why = fmt.Sprintf("a new version waits at the gate; its %d running allocation(s) keep running until it is placed", len(live))
		}
		return r
	case g.Pinned:
		return pinned(g, r, live, old, liveCurrent, canaries)
	case g.Adoptable && invalid:
		r.State, r.Do, r.Replaces = Migrating, Adopt, live
		r.Why = "registered without the gate, and Nomad gave an allocation shares the plugin refuses (a fraction over two GPUs): gpushare places it"
		return r
	case g.Adoptable && len(live) == 0 && missing > 0 && g.NomadRefused:
		r.State, r.Do = Waiting, Adopt
		r.Why = "registered without the gate, and Nomad could not place it: gpushare places it"
		return r
	}
	r.State, r.Why = Unmanaged, "neither gated nor pinned: Nomad alone places it"
	return r
}

// pinned is Reconcile for a group that carries a trusted pin.
func pinned(g Group, r Result, live, old []string, liveCurrent, canaries int) Result {
	switch {
	case canaries > 0 && len(old) > 0:
		r.State = Canarying
		r.Why = fmt.Sprintf("%d canary(ies) run beside %d allocation(s) of the version before; Nomad finishes the deployment when it is promoted", canaries, len(old))
		return r
	case r.Missing == 0:
		r.State, r.Why = Running, fmt.Sprintf("all %d allocation(s) run", len(live))
		return r
	case g.Count > g.PinRoom && g.PinRoom > 0:
		// its pin names shares for fewer allocations than it now asks for
		// (nomad job scale, the Autoscaler): Nomad cannot place the rest
		r.State, r.Do, r.Replaces = Scaling, Grow, live
		r.Why = fmt.Sprintf("scaled to %d allocations, and its pin has room for %d: pinned again for %d", g.Count, g.PinRoom, g.Count)
		if g.NodePin {
			r.Replaces = nil
			if len(live) > 0 {
				r.Why += fmt.Sprintf("; its %d running allocation(s) stay (the new pin keeps their nodes, which Nomad checks in place)", len(live))
			}
		} else if len(live) > 0 {
			r.Why += fmt.Sprintf("; the new pin makes Nomad replace its %d running allocation(s) (a device block's constraints are per group)", len(live))
		}
		return r
	case g.PinLost:
		r.State, r.Do = Migrating, Repin
		if (g.Canary == 0 || g.Batch) && !g.NodePin {
			// the new pin makes Nomad replace the allocations that still
			// run (a device block's constraints are per group), each in
			// the plan that places its replacement: their shares are the
			// new pin's to take. Canaries would run beside them.
			r.Replaces = live
		}
		r.Why = fmt.Sprintf("%d allocation(s) to place, and the capacity its pin names is gone: placed again elsewhere", r.Missing)
		return r
	case g.NomadRefused:
		r.State, r.Do = PinnedUnplaced, Repin
		r.Why = "Nomad evaluated its pin and could not place it on the pinned nodes: placed again without them"
		return r
	}
	r.State = PinnedUnplaced
	r.Why = fmt.Sprintf("pinned; Nomad has %d allocation(s) to place on its pin", r.Missing)
	if liveCurrent < len(live) {
		r.Why += fmt.Sprintf(" (%d of the version before still run)", len(live)-liveCurrent)
	}
	return r
}
