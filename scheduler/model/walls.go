package model

import (
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Manages reports whether the scheduler manages namespace ns (Managed;
// all when unset). Namespaces are walls: an allocation of another is a
// neighbour whose shares are taken, never one the scheduler stops, gates,
// pairs by its class or counts for a virtual cluster.
func (s *State) Manages(ns string) bool {
	return s.Managed == nil || s.Managed(orDefault(ns))
}

// Attribution is the virtual cluster and class a group's allocations
// count for: those of the placement the scheduler signed for the group
// (its current version's or, while a new version waits at the gate, the
// earlier version's its allocations run under), never what the job's meta
// says now: a gpushare.vc edited after the pin, or written on a job the
// scheduler never placed, claims no guarantee, and only a signed
// opportunistic placement may be preempted. A VC counts only when it
// admits the group's namespace (Admits) and the namespace is managed;
// otherwise the allocations count for no VC and are of class normal.
// It reads the state only (its records, earlier pins, Managed and Admits),
// so it is a function over it, under whatever lock its caller reads it.
func Attribution(s *State, job *api.Job, group string) (string, placement.Class) {
	ns := orDefault(namespaceOf(job))
	if !s.Manages(ns) {
		return "", placement.ClassNormal
	}
	rec, ok := s.Record(job, group)
	if !ok {
		prior, had := s.Prior(KeyOf(job, group))
		if !had {
			return "", placement.ClassNormal
		}
		rec = prior.Record
	}
	return vcOf(s.Admits, rec, ns), classOf(rec)
}

// vcOf is the VC a signed record was made for, when it admits namespace
// ns (admits: State.Admits).
func vcOf(admits func(vc, namespace string) bool, rec *pin.Record, ns string) string {
	if rec.VC == "" || (admits != nil && !admits(rec.VC, ns)) {
		return ""
	}
	return rec.VC
}

func classOf(rec *pin.Record) placement.Class {
	switch c := placement.Class(rec.Class); c {
	case placement.ClassProduction, placement.ClassOpportunistic:
		return c
	}
	return placement.ClassNormal
}
