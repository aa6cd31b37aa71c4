package service

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// collected is what collect returns, and what deriveJob fills for each
// job it looks at.
type collected struct {
	groups  []decide.Group
	jobs    map[decide.Key]*api.Job // each group's job, as decided on
	pending map[decide.Key]string
	inPlace []decide.Action // pins written back without a decision (inPlaceOnly)
	stages  map[decide.Key]lifecycle.Result
	seen    map[string]nodeSet    // node sets by rules, for this pass
	known   map[string]nodeSet    // and those of the passes before (nodeSetMemo; read only)
	said    map[decide.Key]string // what Nomad said of pins it could not place
	shape   uint64                // clusterShape of the pass
	built   *model.Built          // the pass's snapshot
	// later keeps the writes to what workers share (shared), for a
	// worker's part; looked counts the jobs it looked at.
	later  *[]func()
	looked int
}

// collect asks lifecycle.Reconcile where each group stands and lists the
// groups to decide: gated groups, ungated gpushare groups to adopt
// (adopt_ungated), pinned groups whose capacity is gone or that were
// scaled past their pin. Groups that cannot be turned into a request, or
// that were refused for good and neither their job nor the cluster's nodes
// changed since, are returned as pending, with why; unchanged groups on
// nodes that take no new work, as pins to write back without a decision
// (inPlaceOnly).
//
// Most groups of a large cluster run where they were pinned and nothing
// about them changes from one pass to the next: collect looks again only
// at the jobs whose inputs changed (collectCache), and reuses for the
// others what the last pass found. It returns what the pass decides on:
// out's groups, jobs, pending, inPlace and said. The caller holds s.mu.
func (s *loop) collect(built *model.Built, shape uint64) *collected {
	c := s.collectCache()
	out := &collected{jobs: make(map[decide.Key]*api.Job, c.sized), groups: make([]decide.Group, 0, c.sized),
		seen: map[string]nodeSet{}, said: map[decide.Key]string{}, shape: shape, built: built}
	if !c.full { // reuse off: node sets found again too
		out.known = s.mirror.knownNodeSets(built.Snapshot)
	}
	c.looked = 0
	anyGone := false
	var touched model.Touched
	if !c.full {
		touched = s.state.TakeTouched()
	}
	switch {
	case c.full:
		// reuse off: every job looked at, the cache left as it was
		// (what changed meanwhile stays marked for it)
		out.pending, out.stages = map[decide.Key]string{}, map[decide.Key]lifecycle.Result{}
		s.deriveJobs(slices.Collect(maps.Keys(s.state.Jobs)), out, c, nil)
		anyGone = true
	case !c.primed || touched.All:
		// every job looked at, and the cache made anew
		c.reset()
		out.pending, out.stages = map[decide.Key]string{}, c.stages
		s.deriveJobs(slices.Collect(maps.Keys(s.state.Jobs)), out, c, nil)
		c.primed, anyGone = true, true
		c.noteShort(built)
	default:
		look := c.toLook(touched, built)
		keys := make([]string, 0, len(look))
		for k := range look {
			if s.state.Jobs[k] != nil {
				keys = append(keys, k)
			} else {
				anyGone = true
			}
		}
		// what the cache kept of the others is replayed beside the jobs
		// looked at again, which read none of it
		s.deriveJobs(keys, out, c, func(out *collected) {
			for k := range look {
				c.forget(k)
			}
			out.pending = maps.Clone(c.pending)
			out.stages = c.stages
			c.replay(s, look, out)
		})
	}
	s.mirror.keepNodeSets(built.Snapshot, out.seen)
	// forget what concerned groups whose job is gone: the refusals and
	// back-offs every pass (few, and the records save the refusals); the
	// placements' reasons and the allowed nodes, one entry per pinned
	// group, only when a job went
	s.refusals.sweep(s.state)
	if anyGone {
		s.answers.sweep(s.state)
	}
	s.mirror.forget(anyGone)
	if c.full {
		s.note(func() { s.answers.setStages(out.stages) })
	} else {
		c.unpublished = true // publishStages, once the lock is let go
	}
	s.priors.sweep(s.state)
	c.sized = len(out.jobs)
	return out
}

// deriveJob looks at every group of job (by job key k) as collect does,
// adding what it finds to out, and offers the result to the cache c: a
// job whose groups all need nothing done, and whose facts had no effect
// beyond the group (see reusable), is kept and not looked at again until
// its inputs change. The caller holds s.mu.
func (s *loop) deriveJob(k string, job *api.Job, out *collected, c *collectCache) {
	canary := slices.ContainsFunc(job.TaskGroups, func(tg *api.TaskGroup) bool { return waitsForPromote(job, tg) })
	out.shared(func() { c.noteCanaries(k, canary) })
	gated := s.state.Gated(job)
	reusable := true
	var keys []decide.Key
	var decides []decideEntry
	for _, tg := range job.TaskGroups {
		key := model.KeyOf(job, *tg.Name)
		keys = append(keys, key)
		facts, stage, ok, e := s.deriveGroup(job, tg, gated, out)
		switch {
		case e != nil:
			decides = append(decides, *e)
		case !ok || !stageReusable(facts, stage):
			reusable = false
		}
		if _, ok := out.said[key]; ok {
			reusable = false // it noted the nodes Nomad refused (s.refusals): done every pass
		}
	}
	var nodes []string
	if reusable && !c.full {
		nodes = s.nodesRead(job)
	}
	out.shared(func() { c.keep(k, keys, nodes, decides, reusable, out) })
}

// stageReusable reports whether a group's result may be reused while its
// job, its allocations and the nodes they name are unchanged: only a
// group lifecycle.Reconcile leaves alone. A parameterized parent's pool
// reads the whole snapshot, and a gated batch group whether its last run's
// pin is read (s.priors, which readPriors changes outside the model):
// both are looked at every pass.
func stageReusable(f lifecycle.Group, st lifecycle.Result) bool {
	return st.Do == lifecycle.Nothing && !f.Template && !(f.Gated && f.Batch)
}

// deriveGroup is collect for one group: it adds the group to decide, its
// pin to write back or why it waits to out, and returns its facts and
// stage. ok is false when the result read more than the group's own
// inputs. A group to place that has no allocation yet is also returned
// as a decideEntry, which later passes replay while its job and the
// cluster's nodes are unchanged. The caller holds s.mu.
func (s *loop) deriveGroup(job *api.Job, tg *api.TaskGroup, gated []string, out *collected) (lifecycle.Group, lifecycle.Result, bool, *decideEntry) {
	built, shape := out.built, out.shape
	name := *tg.Name
	key := model.KeyOf(job, name)
	facts, lost, refusedOn := s.facts(job, tg, gated, out)
	stage := lifecycle.Reconcile(facts)
	out.stages[key] = stage
	pending := out.pending
	g := decide.Group{Key: key}
	switch stage.Do {
	case lifecycle.Pool:
		if why, ok := s.refusals.backingOff(key, s.now()); ok {
			pending[key] = why
		} else if act, why := s.pools().pin(built, job, key, facts.PoolFull, out); why != "" {
			pending[key] = why
		} else {
			out.inPlace, out.jobs[key] = append(out.inPlace, act), job
		}
		return facts, stage, false, nil
	case lifecycle.Nothing:
		if stage.State == lifecycle.Waiting || (facts.Dispatched && stage.State == lifecycle.PinnedUnplaced) {
			pending[key] = stage.Why // it waits, and nothing gpushare can do places it
		}
		return facts, stage, true, nil
	case lifecycle.Repin:
		// decided again without the nodes its pin lost, nor any
		// Nomad refused it on (not only the last pin's)
		g.Repin, g.Req.Avoid = true, append(lost, refusedOn...)
		g.Replaces = append(slices.Clone(stage.Replaces), holdsOf(built, key)...)
		g.Stay = s.stays(job, tg, facts, lost)
	case lifecycle.Grow:
		// scaled past its pin: decided again for its new count,
		// on the shares its allocations hold and its pin holds
		// (Nomad refused the pinned nodes only for want of room)
		g.Repin, g.Req.Avoid = true, lost
		g.Replaces = append(slices.Clone(stage.Replaces), holdsOf(built, key)...)
		g.Stay = s.stays(job, tg, facts, lost)
	}
	if (stage.Do == lifecycle.Place || stage.Do == lifecycle.Adopt) && !facts.Template && !(facts.Gated && facts.Batch) &&
		len(s.state.GroupAllocs(key.Namespace, key.Job, name)) == 0 {
		if _, said := out.said[key]; !said {
			e := s.prepare(job, tg, stage, out)
			s.replay(e, out)
			return facts, stage, false, &e
		}
	}
	if why, ok := s.refusals.backingOff(key, s.now()); ok {
		pending[key] = why
		return facts, stage, false, nil
	}
	// Nomad's own rules first: a group no node passes waits, holding nothing
	ns, err := s.mirror.feasibleNodes(built.Snapshot, job, name, out)
	if err != nil || ns.none != "" {
		pending[key] = cmp.Or(ns.none, fmt.Sprint(err))
		return facts, stage, false, nil
	}
	out.shared(func() { s.mirror.noteFeasible(key, ns) })
	if r, ok := s.refusals.refusedForGood(key); ok {
		if r.holds(job, shape, ns.hash) {
			pending[key] = r.reason
			return facts, stage, false, nil
		}
		out.note(s, func() { s.refusals.forgive(key) })
	}
	req, err := s.state.Request(job, name, s.profile)
	if err != nil {
		// only a new version of the job can change a bad request:
		// refused, like a group no node can ever hold
		pending[key] = err.Error()
		out.note(s, func() { s.refusals.refuse(key, newRefusal(job, err.Error(), shape, ns.hash)) })
		return facts, stage, false, nil
	}
	if why := cmp.Or(overlapWhy(s.state.Jobs, job), vcRefusal(s.cfg, key, req.VC)); why != "" {
		pending[key] = why
		return facts, stage, false, nil
	}
	req.Avoid = g.Req.Avoid
	if ns.apart { // distinct_hosts at job level: off the nodes the job's other groups are pinned to
		g.Apart = model.JobKey(key.Namespace, key.Job)
		req.Avoid = append(slices.Clip(req.Avoid), s.moves.pinnedNodesOfOthers(job, name)...)
	}
	req.Allowed, req.DistinctNodes, req.Limits = ns.allowed, ns.distinct, ns.limits
	req.Models = ns.narrow(req.Models)
	g.Req = req
	if stage.Do == lifecycle.Place || stage.Do == lifecycle.Adopt {
		live := s.state.GroupAllocs(key.Namespace, key.Job, name)
		held := s.moves.held(key)
		keep := s.moves.keep(job, key, held)
		// a change Nomad replaces allocations for (a new image, env,
		// config) several at once where two share a node on GPUs of
		// their own: beside what runs, staged (hold.go)
		together := replacedTogether(job, tg, live) && s.moves.replacedAnyway(job, key)
		if (stage.Beside || together) && s.moves.replacedAnyway(job, key) {
			// the same placement, but a change Nomad replaces
			// allocations for, deployed with canaries: they need
			// room beside what runs
			keep = nil
		}
		if s.moves.inPlaceOnly(job, name, keep) {
			// unchanged, on nodes that take no new work (ineligible,
			// draining) but still run it: its pin is written back
			// without a decision, and Nomad updates it in place
			// there, as it would without gpushare
			out.inPlace = append(out.inPlace, keptAction(key, s.policy.Name(), req, keep))
			out.jobs[key] = job
			return facts, stage, false, nil
		}
		g.Keep = ns.keepable(keep)
		if g.Keep == nil && len(live) > 0 && facts.Gated && s.priors.unread(s.state, key, live[0].ID, out) {
			// its running allocations' pin is read before it is
			// decided, so that an unchanged group keeps its place
			pending[key] = "reading the pin its running allocations were placed with"
			return facts, stage, false, nil
		}
		switch {
		case g.Keep != nil: // unchanged for its placement: written back, Nomad updates in place or replaces on the same shares
			g.Replaces = ids(live)
		case stage.Beside, together:
			// canaries: placed beside what runs, which keeps its
			// shares until the deployment is promoted; replaced
			// together: see replacedTogether
		default:
			g.Replaces = stage.Replaces // a new version takes its old shares
			g.Prefer = ns.keepable(held)
		}
	}
	if at := s.records.submitOf(job); at > 0 { // kept across the scheduler's registrations
		g.Submit = time.Unix(0, at)
	}
	out.jobs[key] = job
	out.groups = append(out.groups, g)
	return facts, stage, false, nil
}
