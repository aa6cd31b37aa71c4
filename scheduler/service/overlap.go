package service

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// A periodic job with prohibit_overlap launches no child while one of
// its children still runs: Nomad's dispatcher looks for children that
// are not dead by their ParentID. A child gpushare pinned was registered
// again through Nomad's HTTP API, which drops ParentID (it is not part
// of what a registration carries), so Nomad no longer counts it and
// launches the next child on schedule beside it. That child is one Nomad
// alone would never have launched: gpushare does not place it, and stops
// it (a child left waiting would in turn, its ParentID intact, keep every
// later launch from happening). A child forced by hand (nomad job
// periodic force) runs whatever runs, as under Nomad alone: its launch
// time is not on the parent's schedule.

// overlapWhy says why a gated child of a periodic job must not run
// ("" when it may): its parent prohibits overlap, it was launched on the
// parent's schedule, and an earlier child of the parent is not dead.
// jobs are the model's (model.State.Jobs).
func overlapWhy(jobs map[string]*api.Job, job *api.Job) string {
	if job == nil || job.ID == nil || job.ParentID == nil || *job.ParentID == "" || (job.Stop != nil && *job.Stop) || len(pin.Gated(job)) == 0 {
		return ""
	}
	ns := model.KeyOf(job, "").Namespace
	parent := jobs[model.JobKey(ns, *job.ParentID)]
	if parent == nil || parent.Periodic == nil || parent.Periodic.ProhibitOverlap == nil || !*parent.Periodic.ProhibitOverlap {
		return ""
	}
	launched, ok := launchTime(*job.ID, *job.ParentID)
	if !ok || !onSchedule(parent.Periodic, launched) {
		return ""
	}
	for _, other := range jobs {
		if other == nil || other.ID == nil || *other.ID == *job.ID || model.KeyOf(other, "").Namespace != ns ||
			(other.Status != nil && *other.Status == "dead") || parentOf(jobs, other) != *job.ParentID {
			continue
		}
		if t, ok := launchTime(*other.ID, *job.ParentID); !ok || !t.Before(launched) {
			continue
		}
		return fmt.Sprintf("its parent %s prohibits overlap and its earlier child %s still runs: Nomad, which no longer sees a child gpushare pinned as its parent's (a registration drops ParentID), launched this one, which Nomad alone would have skipped; gpushare stops it", *job.ParentID, *other.ID)
	}
	return ""
}

// periodicLaunch is what Nomad puts between a periodic job's ID and its
// launch's Unix time to name a child it launches.
const periodicLaunch = "/periodic-"

// launchTime is the launch time a periodic child of parent carries in its
// ID ("<parent>/periodic-<unix time>").
func launchTime(id, parent string) (time.Time, bool) {
	at, ok := strings.CutPrefix(id, parent+periodicLaunch)
	if !ok || at == "" || strings.Trim(at, "0123456789") != "" {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// parentOf is the job that launched or dispatched job, "" for none: its
// ParentID, else, for a child of a periodic job, the parent its ID names
// ("<parent>/periodic-<unix time>") when that job is periodic. Nomad's
// HTTP API drops ParentID when a job is registered again, and gpushare
// registers each periodic child it pins, so a placed child has none.
// (Dispatched children are never registered again: theirs stays.) jobs
// are the model's.
func parentOf(jobs map[string]*api.Job, job *api.Job) string {
	if p := deref(job.ParentID); p != "" {
		return p
	}
	id := deref(job.ID)
	i := strings.LastIndex(id, periodicLaunch)
	if i <= 0 || job.Periodic != nil {
		return ""
	}
	if _, ok := launchTime(id, id[:i]); !ok {
		return ""
	}
	parent := jobs[model.JobKey(model.KeyOf(job, "").Namespace, id[:i])]
	if parent == nil || !parent.IsPeriodic() {
		return ""
	}
	return id[:i]
}

// onSchedule reports whether t is a launch time of the periodic config
// (in its time zone), not the time of a forced launch.
func onSchedule(p *api.PeriodicConfig, t time.Time) bool {
	if p.SpecType == nil {
		return false
	}
	loc, err := p.GetLocation()
	if err != nil {
		return false
	}
	next, err := p.Next(t.In(loc).Add(-time.Second))
	return err == nil && next.Equal(t)
}

// stopOverlaps stops the gated children Nomad would not have launched
// (overlapWhy). Only the leader stops.
func (s *loop) stopOverlaps(ctx context.Context) {
	h, _ := s.nomad.(holdNomad) // the client that stops holds stops these
	if h == nil || s.lease.mayWrite() != nil {
		return
	}
	type stop struct{ ns, id, why string }
	var stops []stop
	s.mu.Lock()
	for _, j := range s.state.Jobs {
		if why := overlapWhy(s.state.Jobs, j); why != "" {
			stops = append(stops, stop{*j.Namespace, *j.ID, why})
		}
	}
	s.mu.Unlock()
	for _, st := range stops {
		rctx, cancel := s.request(ctx)
		err := h.StopJob(rctx, st.ns, st.id)
		cancel()
		if err != nil && !isNotFound(err) {
			s.log.Warn("cannot stop a periodic child that overlaps its earlier one; trying again at the next pass", "job", st.id, "error", err)
			continue
		}
		s.log.Info("stopped a periodic child Nomad would not have launched", "namespace", st.ns, "job", st.id, "reason", st.why)
	}
}
