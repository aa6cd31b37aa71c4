package service

import (
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// collectCache is what collect found for each job in the passes before,
// so that a pass looks again only at the jobs whose inputs changed. A job
// is reused when every group of it needs nothing done (stageReusable) and
// its facts noted nothing outside the group; it is looked at again when
//
//   - the model marks its job changed (model.State.TakeTouched): a new
//     version, a purge, an allocation of it put, changed or dropped, an
//     evaluation of it, an earlier pin learned, a learned profile;
//   - a node its result read changed: a node its groups' pins name or one
//     of its allocations runs on (usable, healthy GPUs, the job's own
//     rules: lost, failingNodes, NomadFailed, Reservable);
//   - whether its pin's shares are taken by another allocation changed
//     (model.Built.Short, read from the whole snapshot);
//   - the model asks for everything (TakeTouched's All: the trust in pin
//     records, a learned profile of no group), or the cache is switched off.
//
// A job whose groups to place have no allocation yet is reused too: what
// it derived of them from the job and the nodes (decideEntry) is replayed
// every pass, and it is looked at again whenever any node changed (the
// nodes its rules allow are chosen among all of them).
//
// Every other job (groups to move or to grow, pools, gated batch groups,
// groups with allocations to keep or replace, or whose pin Nomad refused)
// is looked at every pass, as before. Only the loop's goroutine uses it,
// under s.mu.
type collectCache struct {
	// full switches reuse off: every pass looks at every job and the
	// cache is left empty (benchmarks compare the two, tests check they
	// agree), like model.State.Rebuild for the snapshot.
	full bool
	// primed: the cache holds every job of the state (a full walk filled it).
	primed bool
	// entries are the jobs the last pass knew, by job key; volatile those
	// of them looked at every pass.
	entries  map[string]collectEntry
	volatile map[string]bool
	// deciding are the reused jobs with groups to place (decideEntry).
	deciding map[string]bool
	// byNode are the reused jobs whose result read each node.
	byNode map[string]map[string]bool
	// stages are every group's stage, as the last pass found it; pending
	// why each reused group waits (lifecycle's reason).
	stages  map[decide.Key]lifecycle.Result
	pending map[decide.Key]string
	// short is model.Built.Short of the last pass (true entries only).
	short map[decide.Key]bool
	// looked counts the jobs the last pass looked at, workers the
	// goroutines it looked at them with (tests read them).
	looked, workers int
	// unpublished: stages changed since publishStages last copied them.
	unpublished bool
	// sized is how many groups the last pass handed the step, to size
	// the next pass's maps.
	sized int
	// canaries are the jobs with a group that deploys with canaries Nomad
	// does not promote itself (promotable looks only at them), kept for
	// every job collect looked at, reused or not.
	canaries map[string]bool
}

// noteCanaries keeps whether job k has a group that deploys with
// canaries Nomad does not promote itself.
func (c *collectCache) noteCanaries(k string, canary bool) {
	if canary {
		c.canaries[k] = true
	} else {
		delete(c.canaries, k)
	}
}

// publishStages makes the stages the last collect found what the API
// shows (s.answers): a copy, for the pass's later steps rewrite what the
// API shows (hold_release.go, promote.go), which the next pass must not
// see. The copy is made without s.mu (the cache is the loop's own; with
// a group an entry, it is the largest thing a pass copies), and only its
// assignment holds it: until then the API shows the last pass's stages.
// The caller does not hold s.mu.
func (s *loop) publishStages() {
	c := s.collectCache()
	if !c.unpublished {
		return
	}
	c.unpublished = false
	stages := maps.Clone(c.stages)
	s.mu.Lock()
	s.answers.setStages(stages)
	s.mu.Unlock()
}

// collectEntry is what the cache knows of one job: its groups' keys and,
// when it is reused, the nodes its result read.
type collectEntry struct {
	keys    []decide.Key
	nodes   []string
	decides []decideEntry
}

// collectCache returns the loop's cache, made on first use.
func (s *loop) collectCache() *collectCache {
	if s.collected == nil {
		s.collected = &collectCache{}
		s.collected.reset()
	}
	return s.collected
}

// reset forgets every job: the next pass looks at all of them.
func (c *collectCache) reset() {
	c.primed = false
	c.entries = map[string]collectEntry{}
	c.volatile = map[string]bool{}
	c.deciding = map[string]bool{}
	c.byNode = map[string]map[string]bool{}
	c.stages = map[decide.Key]lifecycle.Result{}
	c.pending = map[decide.Key]string{}
	c.short = map[decide.Key]bool{}
	c.canaries = map[string]bool{}
}

// toLook lists the jobs (by key) a pass looks at again: those looked at
// every pass, those t marks changed, those whose result read a node t
// marks, and those whose Short changed in built.
func (c *collectCache) toLook(t model.Touched, built *model.Built) map[string]bool {
	look := make(map[string]bool, len(c.volatile)+len(t.Jobs))
	for k := range c.volatile {
		look[k] = true
	}
	for k := range t.Jobs {
		look[k] = true
	}
	for n := range t.Nodes {
		for k := range c.byNode[n] {
			look[k] = true
		}
	}
	if len(t.Nodes) > 0 {
		for k := range c.deciding {
			look[k] = true
		}
	}
	for key, short := range built.Short {
		if short != c.short[key] {
			look[model.JobKey(key.Namespace, key.Job)] = true
		}
	}
	for key := range c.short {
		if !built.Short[key] {
			look[model.JobKey(key.Namespace, key.Job)] = true
		}
	}
	c.noteShort(built)
	return look
}

// noteShort remembers built.Short for the next pass's toLook.
func (c *collectCache) noteShort(built *model.Built) {
	clear(c.short)
	for key, short := range built.Short {
		if short {
			c.short[key] = true
		}
	}
}

// forget drops what the cache knows of job k, before it is looked at again.
func (c *collectCache) forget(k string) {
	delete(c.canaries, k)
	e, ok := c.entries[k]
	if !ok {
		return
	}
	for _, key := range e.keys {
		delete(c.stages, key)
		delete(c.pending, key)
	}
	for _, n := range e.nodes {
		if set := c.byNode[n]; set != nil {
			delete(set, k)
			if len(set) == 0 {
				delete(c.byNode, n)
			}
		}
	}
	delete(c.volatile, k)
	delete(c.deciding, k)
	delete(c.entries, k)
}

// keep records what a pass found for job k (its groups keys, and the
// groups to place it derived from the job and the nodes alone), reused
// in the next passes when reusable (with nodes, the nodes its result
// read: nodesRead), else looked at again every pass. The caller holds
// s.mu.
func (c *collectCache) keep(k string, keys []decide.Key, nodes []string, decides []decideEntry, reusable bool, out *collected) {
	if c.full {
		return
	}
	e := collectEntry{keys: keys}
	if !reusable {
		c.volatile[k] = true
		c.entries[k] = e
		return
	}
	e.nodes, e.decides = nodes, decides
	for _, n := range e.nodes {
		if c.byNode[n] == nil {
			c.byNode[n] = map[string]bool{}
		}
		c.byNode[n][k] = true
	}
	if len(decides) > 0 {
		c.deciding[k] = true
	}
	for _, key := range keys {
		if slices.ContainsFunc(decides, func(d decideEntry) bool { return d.key == key }) {
			continue // replayed every pass
		}
		if why, ok := out.pending[key]; ok {
			c.pending[key] = why
		}
	}
	c.entries[k] = e
}

// replay adds to out the groups to place of the reused jobs not looked
// at again this pass (look). The caller holds s.mu.
func (c *collectCache) replay(s *loop, look map[string]bool, out *collected) {
	for k := range c.deciding {
		if look[k] {
			continue
		}
		for _, e := range c.entries[k].decides {
			s.replay(e, out)
		}
	}
}

// nodesRead lists the nodes a reused job's result may have read: those
// its groups' pins name and those its allocations (of any group, live or
// not) run on. The caller holds s.mu.
func (s *loop) nodesRead(job *api.Job) []string {
	var out []string // a few nodes a job: a list, not a set
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, tg := range job.TaskGroups {
		if rec, ok := s.state.Record(job, *tg.Name); ok {
			for _, n := range rec.Nodes {
				add(n)
			}
		}
		key := model.KeyOf(job, *tg.Name)
		for _, a := range s.state.AllAllocs(key.Namespace, key.Job, key.Group) {
			add(a.NodeID)
		}
	}
	return out
}
