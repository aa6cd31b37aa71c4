package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// Staging a pin, group by group and over passes. A pass registers the
// holds a group's pin needs and looks once whether Nomad has placed them:
// when it has, the pin is registered in the same pass; while it has not,
// the group is left out of its job's registration and waits, its holds
// kept (holdStale), and a later pass looks again — no pass waits for a
// hold. Meanwhile the group keeps its decision (hold_keep.go): its
// shares are held in the snapshot for it, and it is not decided again. A
// hold Nomad has not placed holdPlaced after it was registered (on the
// service's clock) is let go, and its group is decided again without
// staging on that node for holdRefusedFor (holdRules): the same staged
// decision is not made again and again. A group whose holds
// cannot be registered (its namespace does not allow their driver, any
// other refusal) is left out of its job's registration alone; its job's
// other groups are pinned.

// holdRefusedFor is how long a group is not staged on a node where Nomad
// did not place its hold (its CPU, memory or disk were taken).
const holdRefusedFor = 10 * time.Minute

// errHoldsWaiting: the group's holds are registered and Nomad has not
// placed them all yet; the group is pinned by a later pass once it has.
var errHoldsWaiting = errors.New("waiting for Nomad to place the holds of its GPUs")

// errDecideAgain: the group is decided again at once, differently (it is
// not staged where its hold was refused); no back-off.
var errDecideAgain = errors.New("decided again")

// holdWait is a group's pin waiting for its holds.
type holdWait struct {
	digest string
	since  time.Time
	nodes  []string
	// placement is the pin's gpushare.placement, why the placement core's
	// reason, holds the hold jobs as registered (or read back from Nomad)
	placement, why string
	holds          []*api.Job
	// kept: the pass under way pins the group as decided, not decided
	// again (keepStaged); its pin is placement, written back
	kept bool
}

// stage registers the holds the pins of one job need (pinned is the job
// as it will be registered) and looks whether Nomad has placed them. It
// returns the IDs of the holds of the groups that may be pinned now, and
// for each group that may not, why: errHoldsWaiting while Nomad has not
// placed its holds yet (kept), else an error (its holds let go).
func (st *stager) stage(ctx context.Context, pinned *api.Job, acts []decide.Action) ([]string, map[decide.Key]error) {
	h := st.nomad
	if h == nil {
		return nil, nil
	}
	var ids []string
	out := map[decide.Key]error{}
	for _, a := range acts {
		if a.Decision == nil {
			continue
		}
		got, err := st.stageGroup(ctx, h, pinned, a)
		if err != nil {
			out[a.Group] = err
			continue
		}
		ids = append(ids, got...)
	}
	return ids, out
}

// stageGroup is stage for one group: the IDs of its holds, all placed.
func (st *stager) stageGroup(ctx context.Context, h holdNomad, pinned *api.Job, a decide.Action) ([]string, error) {
	live := map[string]bool{}
	st.c.mu.Lock()
	for _, al := range st.c.state.GroupAllocs(a.Group.Namespace, a.Group.Job, a.Group.Group) {
		for _, sh := range model.Shares(al) {
			live[sh] = true
		}
	}
	w, known := st.waiting[a.Group]
	st.c.mu.Unlock()
	var specs []holdSpec
	if !w.kept && !a.Decision.InPlace { // a kept decision's holds are registered already: w.holds
		// (a node pin needs none: Nomad takes each allocation's shares from
		// one GPU's group)
		specs = stagesOf(a.Decision.Placements, live)
	}
	digest := ""
	if len(specs) > 0 || w.kept {
		digest = pinDigest(pinned, a.Group.Group)
	}
	if digest == "" { // most pins: nothing staged
		st.c.mu.Lock()
		delete(st.waiting, a.Group) // the holds of an earlier decision are let go (holdStale)
		st.c.mu.Unlock()
		return nil, nil
	}
	st.readDrivers(ctx, a.Group.Namespace)
	now := st.now()
	st.c.mu.Lock()
	// registered by a pass before (or read back from Nomad), else a new
	// pin's holds are registered now
	registered := known && w.digest == digest
	if w.kept && !registered { // never pinned without the holds it waits for
		delete(st.waiting, a.Group) // its holds are let go (holdStale)
		st.c.mu.Unlock()
		return nil, fmt.Errorf("%w: its pin was not written as its holds stage it", errDecideAgain)
	}
	if !registered {
		placement, _ := pin.Carried(pin.Group(pinned, a.Group.Group))
		w = holdWait{digest: digest, since: now, placement: placement, why: st.notes.placedWhy(a.Group)}
	}
	var jobs []*api.Job
	if registered {
		jobs, specs = w.holds, nil
	}
	var unplaceable []string
	for i, spec := range specs {
		driver := st.drivers.driverFor(st.c.state.Nodes[spec.node], a.Group.Namespace)
		if driver == "" {
			unplaceable = append(unplaceable, spec.node)
			continue
		}
		j := holdJob(a.Group, digest, i, spec, driver, cmp.Or(ptrInt(pinned.Priority), 50))
		j.Meta[metaHoldPlacement] = w.placement
		if sig, ok := st.signer.sign(a.Group, holdPayload(j)); ok {
			j.Meta[metaHoldSig] = sig
		}
		jobs = append(jobs, j)
	}
	st.c.mu.Unlock()
	if len(unplaceable) > 0 {
		// the placement staged it where no hold may run (the namespace's
		// rules were learned since): decided again, one per node there
		return nil, fmt.Errorf("%w: %s", errDecideAgain, st.drivers.whyNot(a.Group.Namespace, unplaceable))
	}
	var ids []string
	fail := func(err error) ([]string, error) {
		st.unstage(ctx, pinned, ids)
		st.c.mu.Lock()
		delete(st.waiting, a.Group)
		st.c.mu.Unlock()
		return nil, err
	}
	for _, j := range jobs {
		if registered {
			ids = append(ids, *j.ID)
			continue
		}
		if err := st.lease.mayWrite(); err != nil {
			return fail(err)
		}
		err := st.registerHold(ctx, h, j)
		if err != nil {
			if st.drivers.learn(a.Group.Namespace, err, st.now()) {
				// Nomad refused the hold's driver in the namespace: the
				// group is decided again with what was learned
				return fail(fmt.Errorf("%w: %s (Nomad: %v)", errDecideAgain, st.drivers.whyNot(a.Group.Namespace, []string{j.Meta[metaHoldNode]}), err))
			}
			return fail(fmt.Errorf("hold GPUs on node %s for placing the group's allocations one after the other: %w", j.Meta[metaHoldNode], err))
		}
		ids = append(ids, *j.ID)
		st.log.Info("holding GPUs while Nomad places a group's allocations on one node one after the other", "hold", *j.ID,
			"for", j.Meta[metaHoldFor], "node", j.Meta[metaHoldNode], "shares", j.Meta[metaHoldShares], "driver", j.TaskGroups[0].Tasks[0].Driver)
	}
	unplaced := st.unplaced(ctx, h, jobs)
	if len(unplaced) == 0 {
		st.c.mu.Lock()
		delete(st.waiting, a.Group)
		st.c.mu.Unlock()
		return ids, nil
	}
	nodes := make([]string, 0, len(unplaced))
	for _, j := range unplaced {
		nodes = append(nodes, j.Meta[metaHoldNode])
	}
	nodes = slices.Compact(slices.Sorted(slices.Values(nodes)))
	if waited := now.Sub(w.since); waited >= holdPlaced {
		st.c.mu.Lock()
		if st.refusedOn == nil {
			st.refusedOn = map[decide.Key]map[string]time.Time{}
		}
		if st.refusedOn[a.Group] == nil {
			st.refusedOn[a.Group] = map[string]time.Time{}
		}
		for _, n := range nodes {
			st.refusedOn[a.Group][n] = now
		}
		st.c.mu.Unlock()
		st.dirty()
		return fail(fmt.Errorf("%w without holding GPUs on node %s: Nomad did not place hold %s there within %s (its CPU, memory or disk, or the held GPUs, are taken)",
			errDecideAgain, strings.Join(nodes, ", "), *unplaced[0].ID, holdPlaced))
	}
	w.nodes, w.holds = nodes, jobs
	st.c.mu.Lock()
	if st.waiting == nil {
		st.waiting = map[decide.Key]holdWait{}
	}
	st.waiting[a.Group] = w
	st.c.mu.Unlock()
	return nil, fmt.Errorf("%w: %d hold(s) on node %s, registered %s ago; pinned once Nomad has placed them, decided again without them after %s",
		errHoldsWaiting, len(unplaced), strings.Join(nodes, ", "), now.Sub(w.since).Round(time.Second), holdPlaced)
}

// registerHold registers one hold, bounded by a request's timeout.
func (st *stager) registerHold(ctx context.Context, h holdNomad, j *api.Job) error {
	rctx, cancel := st.request(ctx)
	defer cancel()
	return h.RegisterHold(rctx, j)
}

// unplaced lists the holds Nomad has not placed (no live allocation),
// each looked at once: nothing here waits for Nomad to place one.
func (st *stager) unplaced(ctx context.Context, h holdNomad, jobs []*api.Job) []*api.Job {
	var out []*api.Job
	for _, j := range jobs {
		rctx, cancel := st.request(ctx)
		allocs, err := h.JobAllocs(rctx, *j.Namespace, *j.ID)
		cancel()
		if err != nil || !slices.ContainsFunc(allocs, func(a *api.AllocationListStub) bool {
			return a.DesiredStatus == api.AllocDesiredStatusRun && !slices.Contains([]string{api.AllocClientStatusFailed, api.AllocClientStatusLost, api.AllocClientStatusComplete}, a.ClientStatus)
		}) {
			out = append(out, j)
		}
	}
	return out
}

// awaited reports whether a hold stages a pin that waits for Nomad to
// place its holds (stage): kept, though its group is not pinned yet,
// while its decision stands (keepStaged) and, past holdPlaced, until
// stage lets it go. The caller holds the model's lock.
func (st *stager) awaited(key decide.Key, hold *api.Job) bool {
	w, ok := st.waiting[key]
	return ok && w.digest == hold.Meta[metaHoldPin]
}
