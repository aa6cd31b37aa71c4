package model

import (
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// FailedForGood reports whether allocation a, of a batch job, failed and
// Nomad will not place it again: its reconciler counts it among the
// group's count (with the untainted) and places nothing for it. That is a
// failed allocation desired to run whose reschedule policy is disabled
// (attempts 0, not unlimited: a sysbatch job has none), or whose attempts
// are used up — as many reschedule events in its RescheduleTracker within
// the policy's interval before it failed as the policy allows, or a next
// delay past the interval. Nomad measures that from when the allocation
// failed (its tasks' last finish, else its modify time), not from the time
// of an evaluation, so the answer needs no clock: an allocation whose
// attempts are used up stays so.
//
// One Nomad still reschedules (attempts left, now or after its delay), one
// forced to be (nomad job eval -force-reschedule), one stopped or evicted
// (Nomad ignores it and places the count again) and one already replaced
// (NextAllocation set: its replacement is what counts) are not.
func FailedForGood(a *api.Allocation, job *api.Job) bool {
	if a.ClientStatus != api.AllocClientStatusFailed || a.NextAllocation != "" || !pin.Batch(job) {
		return false
	}
	t := a.DesiredTransition
	if t.ForceReschedule != nil && *t.ForceReschedule {
		return false // rescheduled now, whatever its policy says
	}
	stopped := a.DesiredStatus != "" && a.DesiredStatus != api.AllocDesiredStatusRun
	if t.Reschedule == nil || !*t.Reschedule {
		if stopped && (a.DesiredStatus != api.AllocDesiredStatusStop || !lastRescheduleFailed(a)) {
			return false // stopped or evicted: ignored, the count is placed without it
		}
	} else if a.DesiredStatus == api.AllocDesiredStatusStop && !lastRescheduleFailed(a) {
		return true // marked to be rescheduled, but stopped: Nomad's reschedule time says never
	}
	return !rescheduleEligible(a, reschedulePolicy(job, a.TaskGroup))
}

// lastRescheduleFailed: Nomad tried to reschedule a and found no place.
func lastRescheduleFailed(a *api.Allocation) bool {
	rt := a.RescheduleTracker
	return rt != nil && rt.LastReschedule != "" && rt.LastReschedule != "ok"
}

// reschedulePolicy is the reschedule policy of group of job, as Nomad
// canonicalizes it: the job type's defaults (batch: 1 attempt in 24h,
// after 5s, constant), under the job's reschedule block, under the
// group's. A sysbatch (or system) group has none: Nomad never reschedules
// its allocations.
func reschedulePolicy(job *api.Job, group string) *api.ReschedulePolicy {
	typ := api.JobTypeService
	if job.Type != nil {
		typ = *job.Type
	}
	tg := pin.Group(job, group)
	var own *api.ReschedulePolicy
	if tg != nil {
		own = tg.ReschedulePolicy
	}
	if typ == api.JobTypeSysbatch || typ == api.JobTypeSystem {
		return nil
	}
	p := api.NewDefaultReschedulePolicy(typ)
	p.Merge(job.Reschedule)
	p.Merge(own)
	return p
}

// rescheduleEligible reports whether Nomad's reconciler reschedules failed
// allocation a under policy p, now or once its delay has passed.
func rescheduleEligible(a *api.Allocation, p *api.ReschedulePolicy) bool {
	if p == nil {
		return false
	}
	attempts, unlimited := deref(p.Attempts), deref(p.Unlimited)
	if attempts == 0 && !unlimited {
		return false // rescheduling disabled
	}
	failed := lastEventTime(a)
	rt := a.RescheduleTracker
	if attempts > 0 && rt != nil && rt.Events != nil {
		// the attempts made within the interval before it failed
		interval := deref(p.Interval)
		made := 0
		for _, e := range rt.Events {
			if e != nil && failed.UnixNano()-e.RescheduleTime < interval.Nanoseconds() {
				made++
			}
		}
		return made < attempts && nextDelay(a, p, failed) < interval
	}
	return unlimited || (attempts > 0 && rt == nil)
}

// lastEventTime is when Nomad takes a to have failed: the last finish of
// its tasks, else its modify time.
func lastEventTime(a *api.Allocation) time.Time {
	var last time.Time
	for _, ts := range a.TaskStates {
		if ts != nil && ts.FinishedAt.After(last) {
			last = ts.FinishedAt
		}
	}
	if last.IsZero() {
		return time.Unix(0, a.ModifyTime).UTC()
	}
	return last
}

// nextDelay is the delay before Nomad would reschedule a: the policy's
// delay, grown by its delay function over the tracker's events, capped by
// its max delay (and back to the delay once a failed more than the cap
// after the last reschedule). Nomad's API leaves each event's delay out:
// the earlier ones are the policy's series (step), as Nomad made them
// unless a series started again, which only makes them shorter.
func nextDelay(a *api.Allocation, p *api.ReschedulePolicy, failed time.Time) time.Duration {
	var events []*api.RescheduleEvent
	if a.RescheduleTracker != nil {
		for _, e := range a.RescheduleTracker.Events {
			if e != nil {
				events = append(events, e)
			}
		}
	}
	delay := deref(p.Delay)
	if len(events) == 0 {
		return delay
	}
	var before time.Duration // the delay of the event before the last
	for range events[1:] {
		next, _ := step(p, delay, before)
		before, delay = delay, next
	}
	delay, capped := step(p, delay, before)
	if capped && failed.UnixNano()-events[len(events)-1].RescheduleTime > delay.Nanoseconds() {
		delay = deref(p.Delay)
	}
	return delay
}

// step is the delay after a reschedule of delay last (before: the one
// before it, 0 if none) under p's delay function, capped by its max delay
// (capped: it was).
func step(p *api.ReschedulePolicy, last, before time.Duration) (time.Duration, bool) {
	d := deref(p.Delay)
	switch deref(p.DelayFunction) {
	case "exponential":
		d = last * 2
	case "fibonacci":
		switch {
		case before == 0:
		case before == deref(p.MaxDelay) && last == deref(p.Delay):
			d = last // a series started again
		default:
			d = last + before
		}
	default:
		return d, false
	}
	if most := deref(p.MaxDelay); most > 0 && d > most {
		return most, true
	}
	return d, false
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
