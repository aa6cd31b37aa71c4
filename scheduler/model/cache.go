package model

import (
	"slices"
	"sync"

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
	gated    []string               // pin.Gated
	hasGated bool
}

type reqOrErr struct {
	req placement.Request
	err error
}

// jobCache is what was parsed of each job version (parsed), by job key
// (byKey) and by job object (byJob, found without making its key). It is
// the state's but locks itself (mu), as the one part of the state a read
// writes: the cache is filled as it is read, and the service's HTTP API
// reads the state (Record, Request) while a pass reads it too
// (ForReaders). The rest of the state a read leaves alone (but the
// snapshot, which only the pass that calls Snapshot reads).
type jobCache struct {
	mu    sync.Mutex
	byKey map[string]*parsed
	byJob map[*api.Job]*parsed
}

// of returns the parse cache of a job's current version, or nil when the
// job carries no modify index to tell versions apart; jobs are the
// state's (what is kept of jobs no longer there is dropped as it piles
// up). The caller holds c.mu.
func (c *jobCache) of(job *api.Job, profiles *interference.Model, jobs map[string]*api.Job) *parsed {
	if job.ModifyIndex == nil || job.ID == nil {
		return nil
	}
	if p := c.byJob[job]; p != nil && p.index == *job.ModifyIndex {
		// the same object as before: found without making its key
		if profiles != nil && p.profiles != profiles {
			p.profiles, p.reqs = profiles, map[string]reqOrErr{}
		}
		return p
	}
	if c.byKey == nil {
		c.byKey = map[string]*parsed{}
	}
	if len(c.byKey) > 2*len(jobs)+64 { // drop jobs that are gone
		for k := range c.byKey {
			if _, ok := jobs[k]; !ok {
				delete(c.byKey, k)
			}
		}
	}
	k := jobKey(job)
	p := c.byKey[k]
	if p == nil || p.index != *job.ModifyIndex {
		p = &parsed{index: *job.ModifyIndex, profiles: profiles, reqs: map[string]reqOrErr{}, recs: map[string]*pin.Record{}}
		c.byKey[k] = p
	}
	if profiles != nil && p.profiles != profiles { // requests depend on the profiles
		p.profiles, p.reqs = profiles, map[string]reqOrErr{}
	}
	c.byObject(job, p, jobs)
	return p
}

// byObject remembers p as the parse of job's object, dropping those of
// objects the state (jobs) no longer holds when they pile up. The caller
// holds c.mu.
func (c *jobCache) byObject(job *api.Job, p *parsed, jobs map[string]*api.Job) {
	if c.byJob == nil {
		c.byJob = map[*api.Job]*parsed{}
	}
	if len(c.byJob) > 2*len(jobs)+64 {
		for j := range c.byJob {
			if jobs[jobKey(j)] != j {
				delete(c.byJob, j)
			}
		}
	}
	c.byJob[job] = p
}

// dropObject forgets which parse the object job, no longer the state's,
// was found by (byObject): a job read again each pass would otherwise
// leave one entry an object until they pile up.
func (c *jobCache) dropObject(job *api.Job) {
	c.mu.Lock()
	delete(c.byJob, job)
	c.mu.Unlock()
}

// forget drops everything parsed.
func (c *jobCache) forget() {
	c.mu.Lock()
	c.byKey, c.byJob = nil, nil
	c.mu.Unlock()
}

// Record is pin.ParseRecord, parsed once per job version, for a
// placement Trust accepts.
func (s *State) Record(job *api.Job, group string) (*pin.Record, bool) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	p := s.cache.of(job, nil, s.Jobs)
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
	return !slices.Contains(s.gated(job), group)
}

// gated is pin.Gated, read once per job version.
func (s *State) gated(job *api.Job) []string {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	p := s.cache.of(job, nil, s.Jobs)
	if p == nil {
		return pin.Gated(job)
	}
	if !p.hasGated {
		p.gated, p.hasGated = pin.Gated(job), true
	}
	return p.gated
}

// request is pin.Request, parsed once per job version and profile model.
func (s *State) request(job *api.Job, group string, profiles *interference.Model) (placement.Request, error) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	p := s.cache.of(job, profiles, s.Jobs)
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
	if placement, signature := pin.Carried(pin.Group(job, group)); placement == "" || !s.Trust(key, placement, signature) {
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
	s.cache.forget()
	s.learnedGen++ // the VCs and classes of allocations are read again
	s.changed.all = true
}

// Reservable is snap.Reservable(Shares(a)) where snap is the snapshot
// the last Snapshot returned: the answer is kept with each allocation it
// holds (it depends only on the allocation and its node's GPUs, and the
// allocation leaves the snapshot when either changes).
func (s *State) Reservable(snap *placement.Snapshot, a *api.Allocation) bool {
	if m, ok := s.live.held(a); ok && s.live.snap == snap {
		return m.reservable
	}
	return snap.Reservable(Shares(a))
}

// SharesOf is Shares(a), taken from the snapshot's copy of a when it has
// one (a pass asks for the shares of every allocation). The caller does
// not change the list.
func (s *State) SharesOf(a *api.Allocation) []string {
	if m, ok := s.live.held(a); ok {
		return m.as.Shares
	}
	return Shares(a)
}
