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
// parent's schedule, and an earlier child of the parent is not dead. The
// caller holds s.mu.
func (s *loop) overlapWhy(job *api.Job) string {
	if job == nil || job.ID == nil || job.ParentID == nil || *job.ParentID == "" || (job.Stop != nil && *job.Stop) || len(pin.Gated(job)) == 0 {
		return ""
	}
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	parent := s.state.Jobs[model.JobKey(ns, *job.ParentID)]
	if parent == nil || parent.Periodic == nil || parent.Periodic.ProhibitOverlap == nil || !*parent.Periodic.ProhibitOverlap {
		return ""
	}
	prefix := *job.ParentID + periodicInfix
	launched, ok := launchTime(*job.ID, prefix)
	if !ok || !onSchedule(parent.Periodic, launched) {
		return ""
	}
	for _, other := range s.state.Jobs {
		if other == nil || other.ID == nil || *other.ID == *job.ID || !strings.HasPrefix(*other.ID, prefix) ||
			other.Namespace == nil || *other.Namespace != ns || (other.Status != nil && *other.Status == "dead") {
			continue
		}
		if t, ok := launchTime(*other.ID, prefix); !ok || !t.Before(launched) {
			continue
		}
		return fmt.Sprintf("its parent %s prohibits overlap and its earlier child %s still runs: Nomad, which no longer sees a child gpushare pinned as its parent's (a registration drops ParentID), launched this one, which Nomad alone would have skipped; gpushare stops it", *job.ParentID, *other.ID)
	}
	return ""
}

// periodicInfix joins a periodic parent's ID and a child's launch time
// (Unix seconds), as Nomad names the child.
const periodicInfix = "/periodic-"

// launchTime is a periodic child's launch time, from its ID.
func launchTime(id, prefix string) (time.Time, bool) {
	sec, err := strconv.ParseInt(strings.TrimPrefix(id, prefix), 10, 64)
	if err != nil || !strings.HasPrefix(id, prefix) {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
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
	h := s.holder()
	if h == nil || s.lease.mayWrite() != nil {
		return
	}
	type stop struct{ ns, id, why string }
	var stops []stop
	s.mu.Lock()
	for _, j := range s.state.Jobs {
		if why := s.overlapWhy(j); why != "" {
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
