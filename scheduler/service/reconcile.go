package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// work is one group to decide.
type work struct {
	job   *api.Job
	group string
	req   placement.Request
	// repin: the group is pinned but its pinned capacity is gone.
	repin  bool
	submit int64
}

// reconcile is one pass of the decision loop: decide every gated group in
// a fair order, pin what fits, preempt where a guarantee needs it, and
// re-pin groups whose allocations were lost with their node.
func (s *Service) reconcile(ctx context.Context) {
	s.mu.Lock()
	if !s.synced {
		s.mu.Unlock()
		return
	}
	for id, at := range s.preempted {
		if a, ok := s.state.Allocs[id]; !ok || !model.Live(a) || s.now().Sub(at) > 10*time.Minute {
			delete(s.preempted, id)
		}
	}
	snap, problems := s.state.Snapshot(s.profile, func(id string) bool { _, ok := s.preempted[id]; return ok })
	todo, waiting := s.collect()
	s.confirm()
	now, def := s.now(), config.Duration(s.cfg.DefaultExpectedRuntime)
	ends := s.expectedEnds(snap, now, def)
	s.mu.Unlock()
	for _, p := range problems {
		s.log.Warn("model problem", "problem", p)
	}
	s.metrics.pending.Set(float64(len(todo)))
	oldest := 0.0
	for _, w := range todo {
		if w.submit > 0 {
			oldest = max(oldest, now.Sub(time.Unix(0, w.submit)).Seconds())
		}
	}
	s.metrics.oldestPending.Set(oldest)

	pending := map[string]string{}
	for k, why := range waiting {
		pending[k] = why
	}
	var held map[string]time.Time // nodes reserved for the group heldFor (see reserve.go)
	var heldFor string
	for i, w := range todo {
		if ctx.Err() != nil {
			return
		}
		key := w.req.ID
		log := s.log.With("job_id", *w.job.ID, "group", w.group)
		// a new version of a running group may take the shares its old
		// allocations hold: Nomad stops them in the same plan
		var restore []placement.Alloc
		for _, a := range s.groupAllocs(w.job, w.group) {
			if pa, ok := snap.Alloc(a.ID); ok && !w.repin {
				if _, err := snap.Remove(a.ID); err == nil {
					restore = append(restore, pa)
				}
			}
		}
		avoided := backfill(held, now, expectedOf(w.req, def))
		if len(avoided) > 0 {
			w.req.Avoid = append(slices.Clip(w.req.Avoid), avoided...)
		}
		start := s.now()
		d := s.policy.Decide(snap, w.req)
		s.metrics.decisions.WithLabelValues(outcome(d)).Inc()
		if !d.Placed() {
			for _, pa := range restore {
				_ = snap.AddAlloc(pa)
			}
			why := fmt.Sprintf("%s; position %d of %d in the queue (response ratio %.2f)", d.Refusal, i+1, len(todo), responseRatio(w, now, def))
			if len(avoided) > 0 {
				why += fmt.Sprintf("; %d node(s) are held for %s, which waits ahead of it, and this group would not end before", len(avoided), heldFor)
			}
			if held == nil && reservable(d) && s.cfg.ReservationsOn() {
				if held = reserveFor(snap, w.req, ends, now, def); held != nil {
					heldFor = key
					why += "; " + heldReason(held, now)
				}
			}
			pending[key] = why
			log.Debug("group waits", "reason", why)
			continue
		}
		if len(d.Preempt) > 0 {
			if err := s.preempt(ctx, d.Preempt, key); err != nil {
				log.Warn("preemption failed; will retry", "error", err)
				pending[key] = "waiting for preemption: " + err.Error()
				continue
			}
		}
		if s.cfg.PinDelay != "" {
			sleep(ctx, config.Duration(s.cfg.PinDelay))
		}
		if err := s.pinGroup(ctx, w, d); err != nil {
			for _, pa := range restore {
				_ = snap.AddAlloc(pa)
			}
			if errors.Is(err, ErrConflict) {
				s.metrics.conflicts.Inc()
				log.Info("job changed while deciding; deciding again on the new version")
				s.markDirty()
			} else {
				log.Error("cannot pin the placement", "error", err)
			}
			pending[key] = "pin failed: " + err.Error()
			continue
		}
		s.metrics.pinLatency.Observe(s.now().Sub(start).Seconds())
		if err := snap.Apply(d); err != nil {
			log.Warn("placement could not be applied to the local snapshot; relisting", "error", err)
			s.markDirty()
		}
		for _, p := range d.Placements {
			ends[p.AllocID] = now.Add(expectedOf(w.req, def))
		}
	}
	s.mu.Lock()
	s.pending = pending
	s.mu.Unlock()
}

// collect lists the groups to decide, in a fair order (see order). Groups that
// cannot be turned into a request are returned as waiting, with why.
// The caller holds s.mu.
func (s *Service) collect() ([]work, map[string]string) {
	var todo []work
	waiting := map[string]string{}
	for _, job := range s.state.Jobs {
		if job.Stop != nil && *job.Stop {
			continue
		}
		gated := pin.Gated(job)
		for _, tg := range job.TaskGroups {
			group := *tg.Name
			isGated := slices.Contains(gated, group)
			repin, avoid := false, []string(nil)
			if !isGated {
				repin, avoid = s.lost(job, group)
				if !repin {
					continue
				}
			}
			req, err := s.state.Request(job, group, s.profile)
			if err != nil {
				waiting[groupKey(job, group)] = err.Error()
				continue
			}
			req.Avoid = avoid
			w := work{job: job, group: group, req: req, repin: repin}
			if job.SubmitTime != nil {
				w.submit = *job.SubmitTime
			}
			todo = append(todo, w)
		}
	}
	order(todo, s.now(), config.Duration(s.cfg.DefaultExpectedRuntime))
	return todo, waiting
}

func guaranteed(r placement.Request) bool {
	return r.VC != "" && r.Class != placement.ClassOpportunistic
}

// lost reports whether a pinned group lost allocations together with the
// capacity it was pinned to (its node is down, drained or gone), so that
// the replacements cannot be placed until it is pinned elsewhere. The
// caller holds s.mu.
func (s *Service) lost(job *api.Job, group string) (bool, []string) {
	rec, ok := pin.ParseRecord(job, group)
	if !ok {
		return false, nil
	}
	tg := pin.Group(job, group)
	count := 1
	if tg.Count != nil {
		count = *tg.Count
	}
	live := s.state.GroupAllocs(nsOf(job), *job.ID, group)
	if len(live) >= count || (job.Type != nil && *job.Type == api.JobTypeBatch && len(live) == 0 && s.anyComplete(job, group)) {
		return false, nil
	}
	var gone []string
	for _, n := range rec.Nodes {
		node, ok := s.state.Nodes[n]
		if !ok || !model.Usable(node) {
			gone = append(gone, n)
		}
	}
	if len(gone) == 0 {
		return false, nil
	}
	// a live allocation still on a good node keeps its shares; the rest
	// must go elsewhere
	return true, gone
}

func (s *Service) anyComplete(job *api.Job, group string) bool {
	for _, a := range s.state.Allocs {
		if a.JobID == *job.ID && a.TaskGroup == group && a.ClientStatus == api.AllocClientStatusComplete {
			return true
		}
	}
	return false
}

func (s *Service) groupAllocs(job *api.Job, group string) []*api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.GroupAllocs(nsOf(job), *job.ID, group)
}

func nsOf(job *api.Job) string {
	if job.Namespace == nil {
		return ""
	}
	return *job.Namespace
}

// pinGroup re-registers the job with the group pinned, enforcing the
// job's modify index so a concurrent edit is never overwritten.
func (s *Service) pinGroup(ctx context.Context, w work, d *placement.Decision) error {
	job, err := copyJob(w.job)
	if err != nil {
		return err
	}
	rec, err := pin.Pin(job, w.group, d)
	if err != nil {
		return err
	}
	index := uint64(0)
	if w.job.JobModifyIndex != nil {
		index = *w.job.JobModifyIndex
	}
	err = s.nomad.Register(ctx, job, index)
	if fresh, ferr := s.nomad.Job(ctx, nsOf(w.job), *w.job.ID); ferr == nil {
		s.mu.Lock()
		s.state.PutJob(fresh)
		s.mu.Unlock()
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.pinned[w.req.ID] = s.now()
	s.mu.Unlock()
	s.metrics.pins.Inc()
	if w.repin {
		s.log.Warn("re-pinned a group whose pinned node is gone; Nomad replaces its allocations", "job_id", *w.job.ID, "group", w.group, "avoid", w.req.Avoid, "nodes", rec.Nodes)
	}
	s.log.Info("pinned", "job_id", *w.job.ID, "group", w.group, "nodes", rec.Nodes, "gpus", len(rec.GPUs), "shares", len(rec.Shares), "cell", rec.Cell, "reason", rec.Reason)
	return nil
}

// preempt stops opportunistic allocations by gating their groups again:
// Nomad replaces the allocations, and the replacements wait at the gate
// until capacity frees.
func (s *Service) preempt(ctx context.Context, allocIDs []string, forKey string) error {
	type target struct{ ns, job, group string }
	targets := map[target][]string{}
	s.mu.Lock()
	for _, id := range allocIDs {
		a, ok := s.state.Allocs[id]
		if !ok {
			continue
		}
		t := target{a.Namespace, a.JobID, a.TaskGroup}
		targets[t] = append(targets[t], id)
	}
	s.mu.Unlock()
	for t, ids := range targets {
		job, err := s.nomad.Job(ctx, t.ns, t.job)
		if err != nil {
			return fmt.Errorf("reading job %s: %w", t.job, err)
		}
		index := *job.JobModifyIndex
		pin.Unpin(job, t.group)
		if err := s.nomad.Register(ctx, job, index); err != nil {
			return fmt.Errorf("gating %s/%s again: %w", t.job, t.group, err)
		}
		// a gated version does not stop running allocations by itself
		for _, id := range ids {
			if err := s.nomad.StopAlloc(ctx, id); err != nil && !isNotFound(err) {
				return fmt.Errorf("stopping allocation %s of %s/%s: %w", id, t.job, t.group, err)
			}
		}
		s.mu.Lock()
		for _, id := range ids {
			s.preempted[id] = s.now()
		}
		s.mu.Unlock()
		s.metrics.preemptions.Add(float64(len(ids)))
		s.log.Warn("preempted opportunistic allocations for a guaranteed job; their group waits at the gate again",
			"job_id", t.job, "group", t.group, "allocations", ids, "for", forKey)
	}
	return nil
}

// confirm checks pinned groups against the allocations Nomad made. The
// caller holds s.mu.
func (s *Service) confirm() {
	for key, at := range s.pinned {
		parts := strings.SplitN(key, "/", 3)
		if len(parts) != 3 {
			delete(s.pinned, key)
			continue
		}
		job := s.state.Jobs[model.JobKey(parts[0], parts[1])]
		if job == nil {
			delete(s.pinned, key)
			continue
		}
		rec, ok := pin.ParseRecord(job, parts[2])
		if !ok {
			delete(s.pinned, key)
			continue
		}
		allocs := s.state.GroupAllocs(parts[0], parts[1], parts[2])
		if len(allocs) == 0 {
			if s.now().Sub(at) > 5*time.Minute {
				s.log.Warn("pinned group has no allocation after 5m", "group", key)
				delete(s.pinned, key)
			}
			continue
		}
		for _, a := range allocs {
			for _, sh := range model.Shares(a) {
				if !slices.Contains(rec.Shares, sh) {
					s.log.Warn("allocation holds a share outside its pin", "group", key, "alloc_id", a.ID, "share", sh)
				}
			}
		}
		s.metrics.confirmations.Inc()
		s.metrics.placementLatency.Observe(s.now().Sub(at).Seconds())
		delete(s.pinned, key)
	}
}

func outcome(d *placement.Decision) string {
	if d.Placed() {
		return "placed"
	}
	return "refused"
}

// copyJob deep-copies a job through JSON.
func copyJob(j *api.Job) (*api.Job, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	var out api.Job
	return &out, json.Unmarshal(b, &out)
}
