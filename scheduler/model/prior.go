package model

import (
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// priors is what the state keeps of earlier versions of jobs: the last
// trusted pin each group carried before its current version (Prior), so
// that a group re-registered unchanged is pinned with it again and its
// allocations count for what they were placed as (Attribution). It is the
// state's: written under the service's cluster.mu as jobs are put
// (keepPriors), read back (LearnPrior) and forgotten, read by Prior and
// Attribution under it or while no one writes (a pass's read).
type priors struct {
	byGroup map[decide.Key]Prior
}

// set remembers p as group k's earlier pin.
func (ps *priors) set(k decide.Key, p Prior) {
	if ps.byGroup == nil {
		ps.byGroup = map[decide.Key]Prior{}
	}
	ps.byGroup[k] = p
}

// forget drops the earlier pins of job's groups.
func (ps *priors) forget(job *api.Job) {
	for _, tg := range job.TaskGroups {
		delete(ps.byGroup, KeyOf(job, *tg.Name))
	}
}

// Prior is the pin of an earlier version of a group, as that version
// carried it: a group re-registered unchanged is pinned with it again,
// byte for byte, so that Nomad updates its allocations in place.
type Prior struct {
	Placement, Signature string
	Record               *pin.Record
	// Spec is pin.Spec of that version: a version with another spec is
	// replaced by Nomad (destructive), pinned as before or not.
	Spec string
}

// Prior returns the last trusted pin a version of the group carried
// before the current one, if the job is still the same incarnation.
func (s *State) Prior(k decide.Key) (Prior, bool) {
	p, ok := s.priors.byGroup[k]
	if !ok {
		return Prior{}, false
	}
	job := s.Jobs[JobKey(k.Namespace, k.Job)]
	if job == nil || (p.Record.Incarnation != 0 && p.Record.Incarnation != pin.Incarnation(job)) {
		return Prior{}, false
	}
	return p, true
}

// LearnPrior remembers the pin group carries in old, an earlier version
// of the job read back from Nomad (the version a running allocation of the
// group was placed with), when it is trusted and of the current
// incarnation; it reports whether it did. A scheduler that starts while a
// group waits at the gate with allocations running learns their pin so.
func (s *State) LearnPrior(old *api.Job, group string) bool {
	cur := s.Jobs[jobKey(old)]
	tg := pin.Group(old, group)
	if cur == nil || tg == nil || pin.Incarnation(old) != pin.Incarnation(cur) {
		return false
	}
	rec, ok := s.trustedRecord(old, group)
	if !ok {
		return false
	}
	s.setPrior(old, tg, rec)
	return true
}

// setPrior remembers the pin rec that tg carries in job.
func (s *State) setPrior(job *api.Job, tg *api.TaskGroup, rec *pin.Record) {
	s.changed.job(jobKey(job)) // its allocations' attribution may change
	placement, signature := pin.Carried(tg)
	s.priors.set(KeyOf(job, *tg.Name), Prior{Placement: placement, Signature: signature, Record: rec,
		Spec: pin.Spec(job, *tg.Name)})
}

// keepPriors remembers the trusted pins of prev, the version next
// replaces; a group pinned in next has its pin in next instead.
func (s *State) keepPriors(prev, next *api.Job) {
	if pin.Incarnation(prev) != pin.Incarnation(next) {
		s.changed.job(jobKey(prev))
		s.priors.forget(prev)
		return
	}
	for _, tg := range prev.TaskGroups {
		rec, ok := s.Record(prev, *tg.Name)
		if !ok || !s.Pinned(prev, *tg.Name) {
			continue
		}
		s.setPrior(prev, tg, rec)
	}
}
