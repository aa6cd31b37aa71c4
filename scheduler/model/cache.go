package model

import (
	"slices"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// parsed is what was read from one version of a job: a pass reads every
// group's request and pin record, so each version is parsed once.
type parsed struct {
	index    uint64
	profiles *interference.Model
	reqs     map[string]reqOrErr
	recs     map[string]*pin.Record // nil: no record
}

type reqOrErr struct {
	req placement.Request
	err error
}

// parsedOf returns the parse cache of a job's current version, or nil
// when the job carries no modify index to tell versions apart.
func (s *State) parsedOf(job *api.Job, profiles *interference.Model) *parsed {
	if job.ModifyIndex == nil || job.ID == nil {
		return nil
	}
	if s.parsed == nil {
		s.parsed = map[string]*parsed{}
	}
	if len(s.parsed) > 2*len(s.Jobs)+64 { // drop jobs that are gone
		for k := range s.parsed {
			if _, ok := s.Jobs[k]; !ok {
				delete(s.parsed, k)
			}
		}
	}
	k := jobKey(job)
	p := s.parsed[k]
	if p == nil || p.index != *job.ModifyIndex {
		p = &parsed{index: *job.ModifyIndex, profiles: profiles, reqs: map[string]reqOrErr{}, recs: map[string]*pin.Record{}}
		s.parsed[k] = p
	}
	if profiles != nil && p.profiles != profiles { // requests depend on the profiles
		p.profiles, p.reqs = profiles, map[string]reqOrErr{}
	}
	return p
}

// Record is pin.ParseRecord, parsed once per job version, for a
// placement Trust accepts.
func (s *State) Record(job *api.Job, group string) (*pin.Record, bool) {
	p := s.parsedOf(job, nil)
	if p == nil {
		return s.trustedRecord(job, group)
	}
	if rec, ok := p.recs[group]; ok {
		return rec, rec != nil
	}
	rec, ok := s.trustedRecord(job, group)
	if !ok {
		rec = nil
	}
	p.recs[group] = rec
	return rec, ok
}

// Pinned is pin.Pinned with the record parsed once per job version.
func (s *State) Pinned(job *api.Job, group string) bool {
	if _, ok := s.Record(job, group); !ok {
		return false
	}
	return !slices.Contains(pin.Gated(job), group)
}

// request is pin.Request, parsed once per job version and profile model.
func (s *State) request(job *api.Job, group string, profiles *interference.Model) (placement.Request, error) {
	p := s.parsedOf(job, profiles)
	if p == nil {
		return pin.Request(job, group, profiles)
	}
	if r, ok := p.reqs[group]; ok {
		return r.req, r.err
	}
	r, err := pin.Request(job, group, profiles)
	p.reqs[group] = reqOrErr{r, err}
	return r, err
}

func (s *State) trustedRecord(job *api.Job, group string) (*pin.Record, bool) {
	rec, ok := pin.ParseRecord(job, group)
	if !ok || s.Trust == nil {
		return rec, ok
	}
	key, incarnation := KeyOf(job, group), pin.Incarnation(job)
	if parent, ok := DispatchedFrom(job); ok {
		// a dispatched child carries its parent's pin (a pool, placement.Snapshot.Pool),
		// signed for the parent: trusted as the parent's, for the parent
		// it was dispatched from while that one is known
		key.Job, incarnation = parent, rec.Incarnation
		if p := s.Jobs[JobKey(key.Namespace, parent)]; p != nil {
			incarnation = pin.Incarnation(p)
		}
	}
	if tg := pin.Group(job, group); tg == nil || !s.Trust(key, tg.Meta[pin.MetaPlacement], tg.Meta[pin.MetaSignature]) {
		return nil, false
	}
	if rec.Incarnation != 0 && rec.Incarnation != incarnation {
		return nil, false // written for a job purged since: not this one's
	}
	if rec.Request != "" && !rec.ForRequest(job, group) {
		return nil, false // the group was changed after its pin (by hand): the pin is not for this request
	}
	return rec, true
}

// ForgetParsed drops the parsed requests and records, to be read again
// (after Trust changed its mind).
func (s *State) ForgetParsed() {
	s.parsed = nil
	s.learnedGen++ // the VCs and classes of allocations are read again
	s.changed.all = true
}
