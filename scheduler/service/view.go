package service

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// The loop's side of the API: what the API and the page show (view, in
// http.go), read under the model's lock and returned as copies.

// gpuMap builds the GPU map with the usage of the namespaces visible does
// not accept anonymous. It reads the model under the lock and asks
// visible (which may ask Nomad) after it.
func (s *loop) gpuMap(visible func(ns string) bool) *gpumap.Map {
	s.mu.Lock()
	nodes, allocs := nodesNow(s.state), liveAllocsNow(s.state)
	s.mu.Unlock()
	m := gpumap.Build(nodes, allocs)
	m.WithStats(s.history.Latest)
	m.Hide(visible)
	return m
}

// gpuHistory is what the GPUs and the jobs did (gpustats.go).
func (s *loop) gpuHistory() *gpuhistory.Store { return s.history }

// nodesNow lists the model's nodes, for work done after the lock is
// released. The caller holds the model's lock.
func nodesNow(st *model.State) []*api.Node {
	nodes := make([]*api.Node, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		nodes = append(nodes, n)
	}
	return nodes
}

// liveAllocsNow lists the model's live allocations (model.Live), for work
// done after the lock is released. The caller holds the model's lock.
func liveAllocsNow(st *model.State) []*api.Allocation {
	allocs := make([]*api.Allocation, 0, len(st.Allocs))
	for _, a := range st.Allocs {
		if model.Live(a) {
			allocs = append(allocs, a)
		}
	}
	return allocs
}

func (s *loop) jobStatus(ns, id, name string) (JobStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job := s.state.Jobs[model.JobKey(ns, id)]
	if job == nil {
		return JobStatus{}, false
	}
	out := JobStatus{Namespace: name, ID: id}
	if job.Type != nil {
		out.Type = *job.Type
	}
	if job.Status != nil {
		out.Status = *job.Status
	}
	gated := pin.Gated(job)
	for _, tg := range job.TaskGroups {
		gs := GroupStatus{Name: *tg.Name, State: "not-gpushare"}
		key := model.KeyOf(job, *tg.Name)
		if r, err := s.state.Request(job, *tg.Name, s.profile); err == nil && r.Profile.Known() {
			gs.Profile = displayProfile(r.Profile)
		}
		gs.Unpaired = s.intro.lastUnpaired(key)
		gs.Elastic = s.elastic.statusOf(key)
		if st, ok := s.answers.stage(key); ok {
			gs.Lifecycle, gs.LifecycleWhy = string(st.State), st.Why
		}
		for _, a := range s.state.GroupAllocs(ns, id, *tg.Name) {
			gs.Allocs = append(gs.Allocs, a.ID)
			if t, ok := s.history.TimesliceOf(a.ID); ok {
				gs.Timeslice = append(gs.Timeslice, allocTimeslice(t))
			}
		}
		switch rec, ok := s.state.Record(job, *tg.Name); {
		case model.Template(job) && ok && job.IsParameterized() && !slices.Contains(gated, *tg.Name):
			shown := *rec
			shown.Reason = s.answers.placedWhy(key)
			gs.State, gs.Placement = "template", &shown
			gs.Reason = "a parameterized job pinned to a pool of GPUs (one allocation's worth per node): Nomad places each child dispatched from it inside the pool"
		case model.Template(job) && job.IsParameterized() && s.answers.waits(key) != "":
			gs.State, gs.Reason = "pending", s.answers.waits(key)
		case model.Template(job):
			gs.State, gs.Reason = "template", "a periodic or parameterized job: Nomad never places it, and gpushare never decides it; each child it launches or dispatches is a job of its own, decided as it comes"
			if job.IsParameterized() {
				gs.Reason = "a parameterized job: gpushare pins it to a pool of GPUs inside which Nomad places each dispatched child"
			}
		case slices.Contains(gated, *tg.Name) || s.answers.waits(key) != "": // a pin Nomad could not place, or whose capacity is gone, waits too
			gs.State = "pending"
			gs.Reason = s.answers.waits(key)
			if _, never := s.refusals.refusedForGood(key); never {
				gs.State = "refused"
			}
			if gs.Reason == "" {
				gs.Reason = "waiting for the next decision"
			}
		case ok:
			shown := *rec
			shown.Reason = s.answers.placedWhy(key) // the meta says where, the records why
			gs.State, gs.Placement = "pinned", &shown
		default:
			gs.Reason = s.unmanagedWhy(tg, gs.Lifecycle, gs.LifecycleWhy)
		}
		out.Groups = append(out.Groups, gs)
	}
	return out, true
}

// unmanagedWhy says why gpushare does not follow a group (not-gpushare):
// it asks for no gpushare device, or it asks for shares without the gate
// and adopt_ungated is off, or Nomad placed it as it was and gpushare had
// nothing to adopt; a dispatched child says its own reason (lifecycle).
// The caller holds s.mu.
func (s *loop) unmanagedWhy(tg *api.TaskGroup, state, why string) string {
	switch {
	case !pin.Wants(tg):
		return "it asks for no nvidia/gpushare device: Nomad alone places it, and gpushare has nothing to follow"
	case state == string(lifecycle.Unmanaged) && strings.Contains(why, "dispatched"):
		return why
	case !s.cfg.AdoptUngatedOn():
		return "it asks for nvidia/gpushare shares without the gate (the constraint ${meta.gpushare_gate} = pending), and adopt_ungated is off: Nomad alone places it, and gpushare counts its shares but does not follow it"
	}
	return "it asks for nvidia/gpushare shares without the gate (the constraint ${meta.gpushare_gate} = pending), and Nomad placed it as it is, so gpushare did not adopt it (adopt_ungated adopts only a group Nomad cannot place or places on shares the plugin refuses): gpushare counts its shares but does not follow it"
}

// waiting lists the groups of managed namespaces that wait or were
// refused for good, sorted.
func (s *loop) waiting() []Waiting {
	managed := s.namespaces()
	s.mu.Lock()
	defer s.mu.Unlock()
	groups := s.answers.waitingGroups()
	out := make([]Waiting, 0, len(groups))
	for _, k := range groups {
		if !managed.has(k.Namespace) {
			continue
		}
		w := Waiting{Namespace: k.Namespace, Job: k.Job, Group: k.Group, State: "pending", Reason: s.answers.waits(k)}
		if _, never := s.refusals.refusedForGood(k); never {
			w.State = "refused"
		} else if p, ok := s.answers.position(k); ok {
			w.Position, w.Of = p.Position, p.Of
		}
		out = append(out, w)
	}
	return out
}

// nodeNames names nodes by their name, else their ID.
func (s *loop) nodeNames(ids []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if n := s.state.Nodes[id]; n != nil && n.Name != "" {
			out[i] = n.Name
		}
	}
	return out
}

// health is the body of /v1/health.
func (s *loop) health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Health{Status: "ok", Leader: s.lease.isLeader(), Synced: s.synced, Index: s.state.Index, Decided: s.decided, Nodes: len(s.state.Nodes), Jobs: len(s.state.Jobs),
		GateOpen: s.gateOpenNames()}
}

// unpaired lists why each group was last unpaired.
func (s *loop) unpaired() []Unpaired { return s.intro.allUnpaired() }

// preempted lists the groups last preempted, oldest first.
func (s *loop) preemptionsLog() []Preemption { return s.preemptions.recent() }
