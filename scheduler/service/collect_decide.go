package service

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// decideEntry is what collect derives for a group to place that has no
// allocation yet (most groups waiting at the gate) from its job and the
// cluster's nodes alone: the nodes its rules allow, its request and the
// group handed to the step. It is reused while neither changed; what
// depends on anything else (back-off, refusals for good, the queue place
// kept across registrations) is read again every pass (replay).
type decideEntry struct {
	job *api.Job
	key decide.Key
	// none is why no node passes the group's rules ("" when some does);
	// ns the nodes that do.
	none string
	ns   nodeSet
	// reqErr is why the group cannot be turned into a request, vcWhy why
	// it may not run (overlapWhy: a periodic child Nomad would not have
	// launched, or a virtual cluster it may not claim; "" when it may).
	reqErr, vcWhy string
	// g is the group to decide, but for Submit.
	g decide.Group
}

// prepare derives a decideEntry for a group to place (stage.Do Place or
// Adopt) with no live allocation: what collect's walk reads from the job
// and the nodes, in the order it reads them. The caller holds s.mu.
func (s *loop) prepare(job *api.Job, tg *api.TaskGroup, stage lifecycle.Result, out *collected) decideEntry {
	name := *tg.Name
	e := decideEntry{job: job, key: model.KeyOf(job, name)}
	ns, err := s.mirror.feasibleNodes(out.built.Snapshot, job, name, out)
	if err != nil || ns.none != "" {
		e.none = cmp.Or(ns.none, fmt.Sprint(err))
		return e
	}
	e.ns = ns
	req, err := s.state.Request(job, name, s.profile)
	if err != nil {
		e.reqErr = err.Error()
		return e
	}
	if why := cmp.Or(overlapWhy(s.state.Jobs, job), vcRefusal(s.cfg, e.key, req.VC)); why != "" {
		e.vcWhy = why
		return e
	}
	g := decide.Group{Key: e.key}
	req.Avoid = nil // a group placed anew avoids no node of its own
	if ns.apart {   // distinct_hosts at job level: off the nodes the job's other groups are pinned to
		g.Apart = model.JobKey(e.key.Namespace, e.key.Job)
		req.Avoid = append(slices.Clip(req.Avoid), s.moves.pinnedNodesOfOthers(job, name)...)
	}
	req.Allowed, req.DistinctNodes, req.Limits = ns.allowed, ns.distinct, ns.limits
	req.Models = ns.narrow(req.Models)
	g.Req = req
	// no allocation runs: nothing to keep or to prefer (s.keep, s.held);
	// replaced together or with canaries, it replaces nothing
	together := replacedTogether(job, tg, nil) && s.moves.replacedAnyway(job, e.key)
	if !stage.Beside && !together {
		g.Replaces = stage.Replaces // a new version takes its old shares
	}
	e.g = g
	return e
}

// replay adds a decideEntry's group to out as collect's walk would: it
// waits while it backs off, when no node passes its rules, while its
// refusal for good holds, or when it has no request or VC; else it is
// handed to the step. The caller holds s.mu.
func (s *loop) replay(e decideEntry, out *collected) {
	key, pending := e.key, out.pending
	if why, ok := s.refusals.backingOff(key, s.now()); ok {
		pending[key] = why
		return
	}
	if e.none != "" {
		pending[key] = e.none
		return
	}
	out.shared(func() { s.mirror.noteFeasible(key, e.ns) })
	if r, ok := s.refusals.refusedForGood(key); ok {
		if r.holds(e.job, out.shape, e.ns.hash) {
			pending[key] = r.reason
			return
		}
		out.note(s, func() { s.refusals.forgive(key) })
	}
	if e.reqErr != "" {
		// only a new version of the job can change a bad request:
		// refused, like a group no node can ever hold
		pending[key] = e.reqErr
		shape := out.shape
		out.note(s, func() { s.refusals.refuse(key, newRefusal(e.job, e.reqErr, shape, e.ns.hash)) })
		return
	}
	if e.vcWhy != "" {
		pending[key] = e.vcWhy
		return
	}
	g := e.g
	if at := s.records.submitOf(e.job); at > 0 { // kept across the scheduler's registrations
		g.Submit = time.Unix(0, at)
	}
	out.jobs[key] = e.job
	out.groups = append(out.groups, g)
}
