package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// pinsInFlight bounds the pins of one pass sent at once. A burst of jobs
// is decided in one step; sent one after the other, each pin waiting for
// Nomad's answer, the last of 50 would wait for the 49 before it.
const pinsInFlight = 16

// sendPins sends the pins of one pass, up to pinsInFlight jobs at once.
// The step gave each group at most one pin and no share to two groups, so
// the pins of different jobs are independent; those of one job (one per
// group) go in one registration (pinJob), so a job with many groups takes
// one slot for one round trip, as any other job. A failed pin backs off
// its group only. A lost lease, or the end of the pass's context, stops
// the pins not yet sent. The reasons of the groups not pinned go into
// pending.
func (s *loop) sendPins(ctx context.Context, pins []decide.Action, jobs map[decide.Key]*api.Job, pending map[decide.Key]string, failed map[decide.Key]bool, start time.Time) {
	var byJob [][]decide.Action // in the step's order
	at := map[string]int{}
	seen := map[decide.Key]bool{}
	for _, a := range pins {
		if failed[a.Group] || jobs[a.Group] == nil || seen[a.Group] {
			continue
		}
		seen[a.Group] = true
		k := model.JobKey(a.Group.Namespace, a.Group.Job)
		i, ok := at[k]
		if !ok {
			i = len(byJob)
			at[k] = i
			byJob = append(byJob, nil)
		}
		byJob[i] = append(byJob[i], a)
	}
	var mu sync.Mutex
	reasons := map[decide.Key]string{}
	set := func(k decide.Key, why string) {
		mu.Lock()
		reasons[k] = why
		mu.Unlock()
	}
	// pinsInFlight workers take the jobs in the step's order: a goroutine
	// of their own for each job grew its stack anew, a tenth of a pin's
	// work at 2,000 pins a pass
	next := make(chan []decide.Action)
	var wg sync.WaitGroup
	for range min(pinsInFlight, len(byJob)) {
		wg.Go(func() {
			for group := range next {
				err := ctx.Err()
				if err == nil {
					err = s.lease.mayWrite()
				}
				if err != nil {
					// the lease is lost or the pass ended: what is not sent yet is not sent
					for _, a := range group {
						set(a.Group, "pin not sent: "+err.Error())
					}
					continue
				}
				for k, why := range s.sendJob(ctx, group, jobs[group[0].Group], start) {
					set(k, why)
				}
			}
		})
	}
	for _, group := range byJob {
		next <- group
	}
	close(next)
	wg.Wait()
	maps.Copy(pending, reasons)
}

// sendJob pins groups of one job and returns why each group not pinned is
// not.
func (s *loop) sendJob(ctx context.Context, acts []decide.Action, job *api.Job, start time.Time) map[decide.Key]string {
	s.metrics.decisions.WithLabelValues("placed").Add(float64(len(acts)))
	if s.pinDelay > 0 {
		sleep(ctx, s.pinDelay)
	}
	errs := s.pinJob(ctx, job, acts)
	out := map[decide.Key]string{}
	conflict := false
	for _, a := range acts {
		log := s.log.With("job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group)
		err := errs[a.Group]
		switch {
		case err == nil:
			s.refusals.succeeded(a.Group)
			s.metrics.pinLatency.Observe(s.now().Sub(start).Seconds())
		case errors.Is(err, ErrConflict):
			if !conflict {
				conflict = true
				s.metrics.conflicts.Inc()
				log.Info("job changed while deciding; deciding again on the new version")
				s.markDirty()
			}
			out[a.Group] = "pin failed: " + err.Error()
		case errors.Is(err, ErrNotLeader):
			out[a.Group] = "pin not sent: " + err.Error()
		case errors.Is(err, errHoldsWaiting):
			// its holds are registered: a later pass pins it once Nomad
			// placed them (hold_stage.go); no back-off
			out[a.Group] = "not pinned yet: " + err.Error()
		case errors.Is(err, errDecideAgain):
			log.Info("the group's allocations cannot be staged as decided; deciding it again", "reason", err)
			out[a.Group] = "not pinned: " + err.Error()
			s.markDirty()
		case errors.Is(err, errJobGone):
			// purged since it was decided (a finished job, a pipeline's
			// purge): nothing to pin, nothing to retry; its event takes it
			// out of the model
			log.Info("the job is gone since it was decided (purged); nothing to pin", "error", err)
			out[a.Group] = err.Error()
		default:
			why := s.refusals.failed(a.Group, "pin", err, s.now())
			log.Error("cannot pin the placement", "error", err, "reason", why)
			out[a.Group] = why
		}
	}
	return out
}

// pinJob re-registers a job with its groups pinned as the actions
// decided, in one registration that enforces the job's modify index, so
// a concurrent edit is never overwritten: Nomad then places the groups in
// one evaluation, and a job with many groups waits for one answer. A
// group whose pin cannot be written into the job is left out with its
// error and the others are registered; a registration that fails fails
// them all, and a conflict (someone registered the job meanwhile) has
// every group decided again on the new version. It returns each group's
// error (nil: pinned).
func (s *loop) pinJob(ctx context.Context, orig *api.Job, acts []decide.Action) map[decide.Key]error {
	errs := map[decide.Key]error{}
	all := func(err error) map[decide.Key]error {
		for _, a := range acts {
			if _, ok := errs[a.Group]; !ok {
				errs[a.Group] = err
			}
		}
		return errs
	}
	ns, id := acts[0].Group.Namespace, acts[0].Group.Job
	// the job as Nomad's HTTP API gives it, to register again unchanged but
	// for the pins; a newer version than the one decided on is a conflict
	rctx, cancel := s.request(ctx)
	job, err := s.nomad.Job(rctx, ns, id)
	cancel()
	if isNotFound(err) {
		return all(fmt.Errorf("%w: reading job %s: %w", errJobGone, id, err))
	}
	if err != nil {
		return all(fmt.Errorf("reading job %s: %w", id, err))
	}
	if orig.JobModifyIndex != nil && job.JobModifyIndex != nil && *job.JobModifyIndex != *orig.JobModifyIndex {
		s.mu.Lock()
		s.state.PutJob(job)
		s.mu.Unlock()
		return all(fmt.Errorf("%w: version %d decided on, %d registered", ErrConflict, *orig.JobModifyIndex, *job.JobModifyIndex))
	}
	read := job
	job, done, recs := s.writePins(read, acts, errs)
	if len(done) == 0 {
		return errs
	}
	index := uint64(0)
	if orig.JobModifyIndex != nil {
		index = *orig.JobModifyIndex
	}
	if err := s.lease.mayWrite(); err != nil {
		return all(err)
	}
	// several whole-GPU allocations of a group on one node: all but one
	// held until Nomad has placed the one before (hold.go); a group whose
	// holds are not placed (yet) is left out, the others are registered
	holds, out := s.staging.stage(ctx, job, done)
	if len(out) > 0 {
		maps.Copy(errs, out)
		done = slices.DeleteFunc(done, func(a decide.Action) bool { return out[a.Group] != nil })
		if len(done) == 0 {
			return errs
		}
		job, done, recs = s.writePins(read, done, errs) // without the pins left out
		if len(done) == 0 {
			s.staging.unstage(ctx, job, holds)
			return errs
		}
	}
	s.metrics.pinRequests.Inc()
	rctx, cancel = s.request(ctx)
	registered, err := s.nomad.Register(rctx, job, index)
	cancel()
	if err != nil {
		s.staging.unstage(ctx, job, holds)
	}
	if err != nil || registered == 0 {
		// the model learns at once what Nomad holds now (a conflict: the
		// newer version, decided on in the next pass); a request of its
		// own, for the registration's may have timed out
		fctx, fcancel := s.request(ctx)
		fresh, ferr := s.nomad.Job(fctx, ns, id)
		fcancel()
		if ferr == nil {
			s.mu.Lock()
			s.state.PutJob(fresh)
			s.mu.Unlock()
		}
		if err != nil {
			return all(err)
		}
	} else {
		// the model holds the pinned version at once, without reading it
		// back: a pass that starts before its event arrives neither pins
		// the groups again nor gives their shares to other groups
		job.JobModifyIndex, job.ModifyIndex = &registered, &registered
		if job.Version != nil {
			job.Version = new(*job.Version + 1)
		}
		s.mu.Lock()
		s.state.PutOwnJob(job)
		s.records.keepSubmitOfPin(job, index, registered)
		s.mu.Unlock()
	}
	s.mu.Lock()
	for _, a := range done {
		s.unconfirmed.pinned(a.Group, s.now())
	}
	s.mu.Unlock()
	for _, a := range done {
		errs[a.Group] = nil
		rec := recs[a.Group]
		s.metrics.pins.Inc()
		s.countRestarts(orig, a, rec, registered)
		if a.Kind == decide.Repin {
			s.log.Info("re-pinned a group whose pinned capacity is gone or that Nomad could not place", "job_id", a.Group.Job, "group", a.Group.Group, "nodes", rec.Nodes)
		}
		s.log.Info("pinned", "job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group, "nodes", rec.Nodes, "gpus", len(rec.GPUs), "shares", len(rec.Shares),
			"cell", rec.Cell, "queue_position", a.Position, "reason", rec.Reason, "priority", rec.Priority, "groups_in_registration", len(done))
	}
	return errs
}

// writePins writes the pins of acts into a copy of job, and returns it
// with the actions written and their records; the error of each action
// that could not be written goes into errs.
func (s *loop) writePins(job *api.Job, acts []decide.Action, errs map[decide.Key]error) (*api.Job, []decide.Action, map[decide.Key]*pin.Record) {
	var done []decide.Action
	recs := map[decide.Key]*pin.Record{}
	for _, a := range acts {
		rec, pinned, same, err := s.writePin(job, a)
		if err != nil {
			errs[a.Group] = err
			continue
		}
		job, recs[a.Group] = pinned, rec
		a.Kept = a.Kept || same // the running version again: nothing replaced
		done = append(done, a)
	}
	return job, done, recs
}

// writePin writes group a's pin as the action decided into a copy of job,
// signed, and returns it; job is left as it was. same: the group was at
// the gate and is now, in everything Nomad replaces allocations for, the
// pinned version its allocations run (the same placement and signature,
// the same spec): the decision placed it where it was, and Nomad updates
// its allocations in place, as for an earlier pin written back.
func (s *loop) writePin(job *api.Job, a decide.Action) (*pin.Record, *api.Job, bool, error) {
	c := pin.Writable(job)
	var rec *pin.Record
	var err error
	s.mu.Lock()
	prior, kept := s.state.Prior(a.Group)
	staged, waits := s.staging.waitingFor(a.Group)
	ended := s.endedAgain(job, a.Group)
	s.mu.Unlock()
	switch {
	case waits && staged.kept:
		// its holds are registered for this placement: written back as
		// decided, byte for byte (hold_keep.go)
		rec, err = pin.Repeat(c, a.Group.Group, staged.placement, "")
		if err == nil {
			rec.Reason = staged.why
		}
	case a.Kept && kept:
		// re-registered unchanged: the pin it had, byte for byte, so that
		// Nomad updates its allocations in place
		rec, err = pin.Repeat(c, a.Group.Group, prior.Placement, prior.Signature)
		if err == nil {
			rec.Reason = "kept where its allocations run: the group was registered again unchanged"
		}
	default:
		rec, err = pin.PinWith(c, a.Group.Group, a.Decision, s.runtimes.of(a.Decision))
	}
	if err != nil {
		return nil, nil, false, err
	}
	lowerEnded(c, a.Group.Group, ended, rec)
	s.mu.Lock()
	if !(a.Kept && kept) { // signed in the same registration: the pin is the record
		tg := pin.Group(c, a.Group.Group)
		placement, _ := pin.Carried(tg)
		if sig, ok := s.records.sign(a.Group, placement); ok {
			pin.Sign(tg, sig)
		}
	}
	s.answers.place(a.Group, rec.Reason)
	s.mu.Unlock()
	same := false
	if tg := pin.Group(c, a.Group.Group); kept && tg != nil && slices.Contains(pin.Gated(job), a.Group.Group) {
		placement, signature := pin.Carried(tg)
		same = placement == prior.Placement && signature == prior.Signature && prior.Spec != "" && prior.Spec == pin.Spec(c, a.Group.Group)
	}
	return rec, c, same, nil
}
