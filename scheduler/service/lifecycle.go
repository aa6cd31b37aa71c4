package service

import (
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// facts reads from the model what lifecycle.Reconcile decides a group on:
// its job, its allocations of every version, its pin and what Nomad said
// of it. It also returns the nodes a new decision avoids: those whose
// capacity the pin lost, and those Nomad refused the pin on (every one so
// far, noted in s.refusals, with what Nomad said in out.said). The
// caller holds s.mu.
func (s *loop) facts(job *api.Job, tg *api.TaskGroup, gated []string, out *collected) (lifecycle.Group, []string, []string) {
	built := out.built
	name := *tg.Name
	key := model.KeyOf(job, name)
	gatedHere := slices.Contains(gated, name)
	g := lifecycle.Group{
		Template:      model.Template(job),
		Parameterized: job.IsParameterized(),
		Stopped:       job.Stop != nil && *job.Stop,
		Batch:         pin.Batch(job),
		Count:         pin.Count(tg),
		Canary:        canaries(job, tg),
		Gated:         gatedHere,
		Dispatched:    job.Dispatched,
		Adoptable:     s.cfg.AdoptUngatedOn() && !gatedHere && pin.Wants(tg), // its tasks read only when it may be adopted
	}
	if g.Template && g.Parameterized && !g.Gated {
		if rec, ok := s.state.Record(job, name); ok {
			g.Pinned = true
			g.PinLost = poolGone(rec, built.Snapshot)
			g.PoolFull = !g.PinLost && !g.Stopped && g.Count > 0 && s.pools().full(built, job, key, rec, out)
		}
	}
	if g.Template || g.Stopped || g.Count == 0 {
		return g, nil, nil
	}
	for _, a := range s.state.AllAllocs(key.Namespace, key.Job, name) {
		g.Allocs = append(g.Allocs, lifecycle.Alloc{
			ID: a.ID, Live: model.Live(a), Complete: a.ClientStatus == api.AllocClientStatusComplete, FailedForGood: model.FailedForGood(a, job),
			Current: model.Current(a, job), Canary: a.DeploymentStatus != nil && a.DeploymentStatus.Canary,
			Reservable: s.state.Reservable(built.Snapshot, a),
		})
	}
	if g.Gated && g.Batch {
		g.RanUnchanged, g.PriorUnread = s.ranUnchanged(job, key, out)
	}
	var lost, refusedOn []string
	switch {
	case g.Gated:
	case s.state.Pinned(job, name):
		g.Pinned = true
		rec, _ := s.state.Record(job, name)
		g.NodePin = rec.Contract == pin.ContractNode
		g.PinRoom = s.room(job, name, rec)
		short := built.Short[key]
		if short && g.NodePin { // Nomad takes any GPU with room on a pinned node
			if r, err := s.state.Request(job, name, s.profile); err == nil {
				_, missing := s.state.Missing(job, tg)
				short = !nodePinRoom(built, key, rec.Nodes, r.Shares, missing)
			}
		}
		g.PinLost, lost = s.moves.lost(job, name, short)
		if why, failed := s.state.NomadFailed(job, name); failed {
			if _, missing := s.state.Missing(job, tg); missing > 0 {
				// Nomad evaluated this pin and could not place it: decided
				// again without those nodes; it holds nothing meanwhile
				// (model.Snapshot)
				now := s.now()
				on := s.refusals.byNomad(key, rec.Nodes, *job.JobModifyIndex, now) // NomadFailed: set
				out.shared(func() { s.refusals.keepByNomad(key, on) })
				refusedOn = avoidedFor(on, now)
				g.NomadRefused = true
				out.said[key] = why
			}
		}
	default:
		_, g.NomadRefused = s.state.NomadFailed(job, name)
	}
	return g, lost, refusedOn
}

// room is how many allocations a pin names shares for: the count it
// records, or, in a pin written before it recorded one, its shares over
// one allocation's (0: unknown).
func (s *loop) room(job *api.Job, group string, rec *pin.Record) int {
	if rec.Count > 0 {
		return rec.Count
	}
	r, err := s.state.Request(job, group, s.profile)
	if err != nil || r.Shares == 0 {
		return 0
	}
	return len(rec.Shares) / r.Shares
}

// canaries is the canary count of a service group's update block (the
// group's, else the job's): Nomad places that many allocations of a
// changed version beside the running ones before it replaces any.
func canaries(job *api.Job, tg *api.TaskGroup) int {
	if job.Type != nil && *job.Type != api.JobTypeService {
		return 0
	}
	for _, u := range []*api.UpdateStrategy{tg.Update, job.Update} {
		if u != nil && u.Canary != nil {
			return *u.Canary
		}
	}
	return 0
}

// holdsOf lists the holds the snapshot made for a pinned group's missing
// allocations: a new decision for the group may take their shares.
func holdsOf(built *model.Built, key decide.Key) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(built.HeldFor)) {
		if built.HeldFor[id] == key {
			out = append(out, id)
		}
	}
	return out
}

// ids lists the IDs of allocations.
func ids(allocs []*api.Allocation) []string {
	var out []string
	for _, a := range allocs {
		out = append(out, a.ID)
	}
	return out
}

// ranUnchanged reports whether a gated batch group's last run ended
// under a pin of the same request and spec as its current version (the
// same file registered again after the run: Nomad alone would not run it
// again), and whether the pin of that run is still to be read (a
// scheduler that started since; readPriors reads it). The last run is
// the version of the group's latest terminal allocation; it ended when
// nothing of it runs and every allocation of its count completed or
// failed with no reschedule left (model.FailedForGood), as Nomad's
// reconciler counts them: one Nomad still reschedules, or a count not all
// placed, is a run Nomad alone would go on with. The caller holds s.mu.
func (s *loop) ranUnchanged(job *api.Job, key decide.Key, out *collected) (ran, unread bool) {
	all := s.state.AllAllocs(key.Namespace, key.Job, key.Group)
	var last *api.Allocation
	for _, a := range all {
		if model.Live(a) {
			return false, false
		}
		if (a.ClientStatus == api.AllocClientStatusComplete || a.ClientStatus == api.AllocClientStatusFailed) && (last == nil || a.CreateIndex > last.CreateIndex) {
			last = a
		}
	}
	if last == nil || !runEnded(all, last, job, key.Group) {
		return false, false
	}
	prior, ok := s.state.Prior(key)
	if !ok {
		return false, s.priors.unread(s.state, key, last.ID, out)
	}
	return prior.Spec != "" && prior.Spec == pin.Spec(job, key.Group) && prior.Record.Request == pin.Digest(job, key.Group, s.policy.Name()), false
}

// runEnded reports whether the run of allocation last's version (every
// allocation of the group that names it; those that name none when last
// names none) ended as Nomad counts it: as many of them completed or
// failed with no reschedule left as the group's count; or whether every
// name of the group's count ended, in whichever version (EndedNames).
func runEnded(all []*api.Allocation, last *api.Allocation, job *api.Job, group string) bool {
	version := func(a *api.Allocation) (uint64, bool) {
		if a.Job == nil || a.Job.Version == nil {
			return 0, false
		}
		return *a.Job.Version, true
	}
	v, known := version(last)
	ended := 0
	for _, a := range all {
		if av, ok := version(a); ok != known || av != v {
			continue
		}
		if a.ClientStatus == api.AllocClientStatusComplete || model.FailedForGood(a, job) {
			ended++
		}
	}
	// or, name by name, whatever version each last ran: a batch group's
	// version that gpushare wrote with its count lowered by what had
	// ended (batchended.go) ends with the names it ran
	count := pin.Count(pin.Group(job, group))
	return ended >= count || model.EndedNames(all, job, group, false) >= count
}

// poolGone reports whether none of the nodes a parameterized parent's pool
// names can take a dispatched child any more (down, drained, ineligible
// or gone: not in the snapshot), or every GPU of it is unhealthy.
func poolGone(rec *pin.Record, snap *placement.Snapshot) bool {
	for _, id := range rec.Nodes {
		n, ok := snap.Node(id)
		if !ok {
			continue
		}
		for _, g := range n.GPUs {
			if !g.Down && slices.Contains(rec.GPUs, g.UUID) {
				return false
			}
		}
	}
	return true
}
