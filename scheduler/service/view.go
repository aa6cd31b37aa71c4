package service

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// apiView is what the API and the page show (view, in http.go): read
// from the model and from what the loop's parts keep for the API, under
// the model's lock, and returned as copies. It keeps nothing of its own
// and reaches those parts through the small interfaces below; the loop
// does not call it (Service wires it to the API).
type apiView struct {
	c       *cluster
	cfg     *config.Config
	profile *interference.Model
	history *gpuhistory.Store
	lease   leaderReader
	// answers are the last pass's (answers.go), refusals the groups
	// refused for good (refusals.go), unpairs and preemptions the last
	// ones (introspect_state.go, preemptions.go), elastic the elastic
	// groups' status (elastic.go)
	answers     lastAnswers
	refusals    refusedReader
	unpairs     unpairLog
	preemptions preemptionReader
	elastic     elasticReader
}

// lastAnswers is what the view reads of the last pass's answers. The
// caller holds the model's lock.
type lastAnswers interface {
	stage(k decide.Key) (lifecycle.Result, bool)
	placedWhy(k decide.Key) string
	waits(k decide.Key) string
	waitingGroups() []decide.Key
	position(k decide.Key) (queuePos, bool)
	// decided is the model index the last finished pass read.
	decided() uint64
}

// refusedReader says whether a group was refused for good.
type refusedReader interface {
	refusedForGood(k decide.Key) (refusal, bool)
}

// unpairLog is why groups were last unpaired; it locks itself.
type unpairLog interface {
	lastUnpaired(k decide.Key) *Unpaired
	allUnpaired() []Unpaired
}

// preemptionReader lists the groups last preempted, oldest first.
type preemptionReader interface {
	recent() []Preemption
}

// elasticReader is an elastic group's status (nil: not elastic).
type elasticReader interface {
	statusOf(k decide.Key) *ElasticStatus
}

// leaderReader says whether this replica leads.
type leaderReader interface {
	isLeader() bool
}

var (
	_ view             = (*apiView)(nil)
	_ historian        = (*apiView)(nil)
	_ lastAnswers      = (*answers)(nil)
	_ refusedReader    = (*refusals)(nil)
	_ unpairLog        = (*introspection)(nil)
	_ preemptionReader = (*preemptionLog)(nil)
	_ elasticReader    = (*elastic)(nil)
	_ leaderReader     = (*lease)(nil)
)

// newAPIView is the view of the model and of what loop's parts keep.
func newAPIView(s *loop, lease leaderReader) *apiView {
	return &apiView{c: s.cluster, cfg: s.cfg, profile: s.profile, history: s.history, lease: lease,
		answers: &s.answers, refusals: &s.refusals, unpairs: s.intro, preemptions: &s.preemptions, elastic: s.elastic}
}

// namespaces are the namespaces the service manages.
func (v *apiView) namespaces() namespaces { return managedNamespaces(v.cfg.Nomad.Namespaces) }

// gpuMap builds the GPU map with the usage of the namespaces visible does
// not accept anonymous. It reads the model under the lock and asks
// visible (which may ask Nomad) after it.
func (v *apiView) gpuMap(visible func(ns string) bool) *gpumap.Map {
	v.c.mu.Lock()
	nodes, allocs := nodesNow(v.c.state), liveAllocsNow(v.c.state)
	v.c.mu.Unlock()
	m := gpumap.Build(nodes, allocs)
	m.WithStats(v.history.Latest)
	m.Hide(visible)
	return m
}

// gpuHistory is what the GPUs and the jobs did (gpustats.go).
func (v *apiView) gpuHistory() *gpuhistory.Store { return v.history }

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

func (v *apiView) jobStatus(ns, id, name string) (JobStatus, bool) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	job := v.c.state.Jobs[model.JobKey(ns, id)]
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
		if r, err := v.c.state.Request(job, *tg.Name, v.profile); err == nil {
			if r.Profile.Known() {
				gs.Profile = displayProfile(r.Profile)
			}
			gs.Expected = expectedRuntime(r)
		}
		gs.Unpaired = v.unpairs.lastUnpaired(key)
		gs.Elastic = v.elastic.statusOf(key)
		if st, ok := v.answers.stage(key); ok {
			gs.Lifecycle, gs.LifecycleWhy = string(st.State), st.Why
		}
		for _, a := range v.c.state.GroupAllocs(ns, id, *tg.Name) {
			gs.Allocs = append(gs.Allocs, a.ID)
			if t, ok := v.history.TimesliceOf(a.ID); ok {
				gs.Timeslice = append(gs.Timeslice, allocTimeslice(t))
			}
		}
		switch rec, ok := v.c.state.Record(job, *tg.Name); {
		case model.Template(job) && ok && job.IsParameterized() && !slices.Contains(gated, *tg.Name):
			shown := *rec
			shown.Reason = v.answers.placedWhy(key)
			gs.State, gs.Placement = "template", &shown
			gs.Reason = "a parameterized job pinned to a pool of GPUs (one allocation's worth per node): Nomad places each child dispatched from it inside the pool"
		case model.Template(job) && job.IsParameterized() && v.answers.waits(key) != "":
			gs.State, gs.Reason = "pending", v.answers.waits(key)
		case model.Template(job):
			gs.State, gs.Reason = "template", "a periodic or parameterized job: Nomad never places it, and gpushare never decides it; each child it launches or dispatches is a job of its own, decided as it comes"
			if job.IsParameterized() {
				gs.Reason = "a parameterized job: gpushare pins it to a pool of GPUs inside which Nomad places each dispatched child"
			}
		case slices.Contains(gated, *tg.Name) || v.answers.waits(key) != "": // a pin Nomad could not place, or whose capacity is gone, waits too
			gs.State = "pending"
			gs.Reason = v.answers.waits(key)
			if _, never := v.refusals.refusedForGood(key); never {
				gs.State = "refused"
			}
			if gs.Reason == "" {
				gs.Reason = "waiting for the next decision"
			}
		case ok:
			shown := *rec
			shown.Reason = v.answers.placedWhy(key) // the meta says where, the records why
			gs.State, gs.Placement = "pinned", &shown
		default:
			gs.Reason = v.unmanagedWhy(tg, gs.Lifecycle, gs.LifecycleWhy)
		}
		out.Groups = append(out.Groups, gs)
	}
	return out, true
}

// unmanagedWhy says why gpushare does not follow a group (not-gpushare):
// it asks for no gpushare device; a dispatched child says its own reason
// (lifecycle); it carries a placement whose signature does not verify
// (state.Record refused it); it asks for shares without the gate and
// adopt_ungated is off; or Nomad placed it as it was and gpushare had
// nothing to adopt.
// The caller holds the model's lock.
func (v *apiView) unmanagedWhy(tg *api.TaskGroup, state, why string) string {
	switch {
	case !pin.Wants(tg):
		return "it asks for no nvidia/gpushare device: Nomad alone places it, and gpushare has nothing to follow"
	case state == string(lifecycle.Unmanaged) && strings.Contains(why, "dispatched"):
		return why
	case carries(tg):
		return "it carries a gpushare placement that does not verify: its request or gpushare meta was changed after gpushare pinned it, or the placement was written by hand, copied from another group, or made for an earlier job of the same name; gpushare holds no shares for it and does not follow it: put the gate back (the constraint ${meta.gpushare_gate} = pending) and register it again to have it placed"
	case !v.cfg.AdoptUngatedOn():
		return "it asks for nvidia/gpushare shares without the gate (the constraint ${meta.gpushare_gate} = pending), and adopt_ungated is off: Nomad alone places it, and gpushare counts its shares but does not follow it"
	}
	return "it asks for nvidia/gpushare shares without the gate (the constraint ${meta.gpushare_gate} = pending), and Nomad placed it as it is, so gpushare did not adopt it (adopt_ungated adopts only a group Nomad cannot place or places on shares the plugin refuses): gpushare counts its shares but does not follow it"
}

// waiting lists the groups of managed namespaces that wait or were
// refused for good, sorted.
func (v *apiView) waiting() []Waiting {
	managed := v.namespaces()
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	groups := v.answers.waitingGroups()
	out := make([]Waiting, 0, len(groups))
	for _, k := range groups {
		if !managed.has(k.Namespace) {
			continue
		}
		w := Waiting{Namespace: k.Namespace, Job: k.Job, Group: k.Group, State: "pending", Reason: v.answers.waits(k)}
		if _, never := v.refusals.refusedForGood(k); never {
			w.State = "refused"
		} else if p, ok := v.answers.position(k); ok {
			w.Position, w.Of = p.Position, p.Of
		}
		out = append(out, w)
	}
	return out
}

// nodeNames names nodes by their name, else their ID.
func (v *apiView) nodeNames(ids []string) []string {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if n := v.c.state.Nodes[id]; n != nil && n.Name != "" {
			out[i] = n.Name
		}
	}
	return out
}

// health is the body of /v1/health.
func (v *apiView) health() Health {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	return Health{Status: "ok", Leader: v.lease.isLeader(), Synced: v.c.synced, Index: v.c.state.Index, Decided: v.answers.decided(), Nodes: len(v.c.state.Nodes), Jobs: len(v.c.state.Jobs),
		GateOpen: v.c.gateOpenNames()}
}

// unpaired lists why each group was last unpaired.
func (v *apiView) unpaired() []Unpaired { return v.unpairs.allUnpaired() }

// preempted lists the groups last preempted, oldest first.
func (v *apiView) preemptionsLog() []Preemption { return v.preemptions.recent() }

// carries reports whether group tg carries a gpushare placement (in its
// meta or, for a node pin, its constraints: pin.Carried).
func carries(tg *api.TaskGroup) bool {
	placement, _ := pin.Carried(tg)
	return placement != ""
}

// expectedRuntime is the run time of a group's request as GroupStatus
// shows it (nil: none known).
func expectedRuntime(r placement.Request) *ExpectedRuntime {
	switch {
	case r.Expected <= 0:
		return nil
	case r.LearnedFrom > 0:
		return &ExpectedRuntime{Seconds: r.Expected.Seconds(), Source: "learned", Runs: r.LearnedFrom}
	}
	return &ExpectedRuntime{Seconds: r.Expected.Seconds(), Source: "declared"}
}
