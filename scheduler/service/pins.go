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
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// pinsInFlight bounds the pins of one pass sent at once. A burst of jobs
// is decided in one step; sent one after the other, each pin waiting for
// Nomad's answer, the last of 50 would wait for the 49 before it.
const pinsInFlight = 16

// sendPins sends the pins of one pass, up to pinsInFlight jobs at once.
// The step gave each group at most one pin and no share to two groups, so
// the pins of different jobs are independent; those of one job (one per
// group) go in one registration (the pinner's pinJob), so a job with many
// groups takes one slot for one round trip, as any other job. A failed pin backs off
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
	errs := s.pins.pinJob(ctx, job, acts)
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

// pinner writes the pins a pass decided into their jobs and registers
// them with Nomad: each group's pin (pin.PinWith, or an earlier pin or a
// staged kept one written back byte for byte with pin.Repeat), a batch
// group's count lowered by what ended (batchended.go), signed through the
// records, its reason in the answers; then it counts what it sent (the
// unconfirmed pins, the pins and restarts metrics) and logs it. It keeps
// nothing of its own but its runtimes' cache of the nodes' decoded device
// groups (runtime.go). It reaches Nomad through pinNomad, the records
// through pinRecords, staging through pinStaging, the answers through
// pinAnswers and the lease through writeGate; the model and its lock
// through c.
type pinner struct {
	c        *cluster
	nomad    pinNomad
	records  pinRecords
	staging  pinStaging
	answers  pinAnswers
	lease    writeGate
	runtimes *runtimes
	// unconfirmed are the loop's pins sent whose allocations Nomad has
	// not made yet (confirm.go); written under the model's lock
	unconfirmed *unconfirmed
	metrics     *metrics
	log         hclog.Logger
	now         func() time.Time
	// policy is the placement policy's name (pin.Digest); timeout
	// bounds one Nomad request (nomad.request_timeout)
	policy  string
	timeout time.Duration
}

// pinNomad is what writing pins asks of Nomad.
type pinNomad interface {
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	// Register re-registers job if its modify index is still index, and
	// returns the new version's modify index (0 when Nomad did not say).
	Register(ctx context.Context, job *api.Job, index uint64) (uint64, error)
}

// pinRecords is what writing pins asks of the records (state.go,
// submit.go). The caller holds the model's lock.
type pinRecords interface {
	// sign signs a placement, once the key is loaded.
	sign(k decide.Key, placement string) (string, bool)
	// keepSubmitOfPin keeps the job's place in the queue across the pin's
	// registration.
	keepSubmitOfPin(job *api.Job, from, to uint64)
}

// pinStaging is what writing pins asks of the stager (stager.go,
// hold_stage.go, hold.go): the pin a group's registered holds wait for
// (the caller holds the model's lock), and the holds of a registration's
// pins registered, or let go when it fails.
type pinStaging interface {
	waitingFor(k decide.Key) (holdWait, bool)
	stage(ctx context.Context, pinned *api.Job, acts []decide.Action) ([]string, map[decide.Key]error)
	unstage(ctx context.Context, pinned *api.Job, ids []string)
}

// pinAnswers is what writing pins reads and says of a group in the
// answers the API shows (answers.go). The caller holds the model's lock.
type pinAnswers interface {
	place(k decide.Key, why string)
	stage(k decide.Key) (lifecycle.Result, bool)
}

var (
	_ pinNomad   = nomadClient{}
	_ pinRecords = (*records)(nil)
	_ pinStaging = (*stager)(nil)
	_ pinAnswers = (*answers)(nil)
)

// request bounds one Nomad request of a pin (nomad.request_timeout).
func (p *pinner) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.timeout)
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
func (p *pinner) pinJob(ctx context.Context, orig *api.Job, acts []decide.Action) map[decide.Key]error {
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
	rctx, cancel := p.request(ctx)
	job, err := p.nomad.Job(rctx, ns, id)
	cancel()
	if isNotFound(err) {
		return all(fmt.Errorf("%w: reading job %s: %w", errJobGone, id, err))
	}
	if err != nil {
		return all(fmt.Errorf("reading job %s: %w", id, err))
	}
	if orig.JobModifyIndex != nil && job.JobModifyIndex != nil && *job.JobModifyIndex != *orig.JobModifyIndex {
		p.c.mu.Lock()
		p.c.state.PutJob(job)
		p.c.mu.Unlock()
		return all(fmt.Errorf("%w: version %d decided on, %d registered", ErrConflict, *orig.JobModifyIndex, *job.JobModifyIndex))
	}
	read := job
	job, done, recs := p.writePins(read, acts, errs)
	if len(done) == 0 {
		return errs
	}
	index := uint64(0)
	if orig.JobModifyIndex != nil {
		index = *orig.JobModifyIndex
	}
	if err := p.lease.mayWrite(); err != nil {
		return all(err)
	}
	// several whole-GPU allocations of a group on one node: all but one
	// held until Nomad has placed the one before (hold.go); a group whose
	// holds are not placed (yet) is left out, the others are registered
	holds, out := p.staging.stage(ctx, job, done)
	if len(out) > 0 {
		maps.Copy(errs, out)
		done = slices.DeleteFunc(done, func(a decide.Action) bool { return out[a.Group] != nil })
		if len(done) == 0 {
			return errs
		}
		job, done, recs = p.writePins(read, done, errs) // without the pins left out
		if len(done) == 0 {
			p.staging.unstage(ctx, job, holds)
			return errs
		}
	}
	p.metrics.pinRequests.Inc()
	rctx, cancel = p.request(ctx)
	registered, err := p.nomad.Register(rctx, job, index)
	cancel()
	if err != nil {
		p.staging.unstage(ctx, job, holds)
	}
	if err != nil || registered == 0 {
		// the model learns at once what Nomad holds now (a conflict: the
		// newer version, decided on in the next pass); a request of its
		// own, for the registration's may have timed out
		fctx, fcancel := p.request(ctx)
		fresh, ferr := p.nomad.Job(fctx, ns, id)
		fcancel()
		if ferr == nil {
			p.c.mu.Lock()
			p.c.state.PutJob(fresh)
			p.c.mu.Unlock()
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
		p.c.mu.Lock()
		p.c.state.PutOwnJob(job)
		p.records.keepSubmitOfPin(job, index, registered)
		p.c.mu.Unlock()
	}
	p.c.mu.Lock()
	for _, a := range done {
		p.unconfirmed.pinned(a.Group, p.now())
	}
	p.c.mu.Unlock()
	for _, a := range done {
		errs[a.Group] = nil
		rec := recs[a.Group]
		p.metrics.pins.Inc()
		p.countRestarts(orig, a, rec, registered)
		if a.Kind == decide.Repin {
			p.log.Info("re-pinned a group whose pinned capacity is gone or that Nomad could not place", "job_id", a.Group.Job, "group", a.Group.Group, "nodes", rec.Nodes)
		}
		p.log.Info("pinned", "job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group, "nodes", rec.Nodes, "gpus", len(rec.GPUs), "shares", len(rec.Shares),
			"cell", rec.Cell, "queue_position", a.Position, "reason", rec.Reason, "priority", rec.Priority, "groups_in_registration", len(done))
	}
	return errs
}

// countRestarts says how many running allocations of the group a pin
// just registered makes Nomad replace: every one, unless the pin was the
// group's earlier pin written back (Kept), for Nomad treats a change of a
// device block's constraints or of group meta as destructive; a node pin
// after a node pin replaces only those on nodes it leaves out
// (replacedBy). Nomad's
// constraints are per group, so moving one allocation of a count > 1 group
// moves them all; the log, the API's records and
// gpushare_restarts_total{reason} say so. registered is the index Nomad
// gave the pin's registration (0: none said): an allocation created at or
// after it is the pin's own, which Nomad may have placed, and the event
// stream brought, before this runs; it replaces nothing (the churn run's
// "replace" warnings named such allocations, received by their client
// after the warning).
func (p *pinner) countRestarts(orig *api.Job, a decide.Action, rec *pin.Record, registered uint64) {
	if a.Kept {
		return
	}
	var before []*api.Allocation
	p.c.mu.Lock()
	for _, al := range p.c.state.GroupAllocs(a.Group.Namespace, a.Group.Job, a.Group.Group) {
		if registered == 0 || al.CreateIndex < registered {
			before = append(before, al)
		}
	}
	p.c.mu.Unlock()
	running := replacedBy(orig, a.Group.Group, rec, before) // a node pin keeps those on its nodes
	if len(running) == 0 {
		return
	}
	reason := "moved" // gated again while allocations run: unpaired, preempted or changed
	p.c.mu.Lock()
	stage, _ := p.answers.stage(a.Group)
	p.c.mu.Unlock()
	switch {
	case stage.Do == lifecycle.Grow:
		reason = "scale" // scaled past its pin
	case a.Kind == decide.Repin:
		reason = "repin"
	case !slices.Contains(pin.Gated(orig), a.Group.Group):
		reason = "adopt"
	}
	p.metrics.restarts.WithLabelValues(reason).Add(float64(len(running)))
	p.log.Warn("the pin makes Nomad replace the group's running allocations (Nomad's constraints are per group: a new pin replaces every allocation of it)",
		"job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group, "allocations", running, "reason", reason)
}

// writePins writes the pins of acts into a copy of job, and returns it
// with the actions written and their records; the error of each action
// that could not be written goes into errs.
func (p *pinner) writePins(job *api.Job, acts []decide.Action, errs map[decide.Key]error) (*api.Job, []decide.Action, map[decide.Key]*pin.Record) {
	var done []decide.Action
	recs := map[decide.Key]*pin.Record{}
	for _, a := range acts {
		rec, pinned, same, err := p.writePin(job, a)
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
func (p *pinner) writePin(job *api.Job, a decide.Action) (*pin.Record, *api.Job, bool, error) {
	c := pin.Writable(job)
	var rec *pin.Record
	var err error
	p.c.mu.Lock()
	prior, kept := p.c.state.Prior(a.Group)
	staged, waits := p.staging.waitingFor(a.Group)
	ended := p.endedAgain(job, a.Group)
	p.c.mu.Unlock()
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
		rec, err = pin.PinWith(c, a.Group.Group, a.Decision, p.runtimes.of(a.Decision))
	}
	if err != nil {
		return nil, nil, false, err
	}
	lowerEnded(c, a.Group.Group, ended, rec)
	p.c.mu.Lock()
	if !(a.Kept && kept) { // signed in the same registration: the pin is the record
		tg := pin.Group(c, a.Group.Group)
		placement, _ := pin.Carried(tg)
		if sig, ok := p.records.sign(a.Group, placement); ok {
			pin.Sign(tg, sig)
		}
	}
	p.answers.place(a.Group, rec.Reason)
	p.c.mu.Unlock()
	same := false
	if tg := pin.Group(c, a.Group.Group); kept && tg != nil && slices.Contains(pin.Gated(job), a.Group.Group) {
		placement, signature := pin.Carried(tg)
		same = placement == prior.Placement && signature == prior.Signature && prior.Spec != "" && prior.Spec == pin.Spec(c, a.Group.Group)
	}
	return rec, c, same, nil
}
