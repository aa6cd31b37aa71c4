package service

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the HTTP API:
//
//	GET /v1/health          liveness, leadership and the model's index
//	GET /v1/gpus            the GPU map
//	GET /v1/jobs/<id>       each gpushare group's placement, or why it waits (?namespace=)
//	GET /v1/groups          every group that waits or was refused for good, and why
//	GET /v1/vcs             the virtual clusters jobs may name in gpushare.vc
//	GET /v1/profiles        the interference profiles jobs may name in gpushare.profile
//	GET /v1/unpairs         the groups last moved off a GPU they shared, and why
//	GET /v1/preemptions     the groups last preempted for a guaranteed one
//	GET /metrics            Prometheus metrics
//	GET /ui                 the web page (ui.go); / redirects there
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/gpus", s.handleGPUs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.handleJob)
	mux.HandleFunc("GET /v1/groups", s.handleGroups)
	mux.HandleFunc("GET /v1/vcs", s.handleVCs)
	mux.HandleFunc("GET /v1/profiles", s.handleProfiles)
	mux.HandleFunc("GET /v1/unpairs", s.handleUnpairs)
	mux.HandleFunc("GET /v1/preemptions", s.handlePreemptions)
	s.uiRoutes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Health is the body of /v1/health.
type Health struct {
	Status string `json:"status"`
	Leader bool   `json:"leader"`
	Synced bool   `json:"synced"`
	Index  uint64 `json:"index"`
	Nodes  int    `json:"nodes"`
	Jobs   int    `json:"jobs"`
}

func (s *Service) handleHealth(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	h := Health{Status: "ok", Leader: s.IsLeader(), Synced: s.synced, Index: s.state.Index, Nodes: len(s.state.Nodes), Jobs: len(s.state.Jobs)}
	s.mu.Unlock()
	code := http.StatusOK
	if !h.Synced {
		h.Status = "starting"
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// handleGPUs serves the GPU map and the MIG layouts recommended (GPUs).
// Every namespace's allocations hold shares; those of namespaces the
// caller may not see (not managed, or their jobs not readable by its
// token) show as anonymous shares.
func (s *Service) handleGPUs(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{Nodes: true}); err != nil {
		authFailed(w, err)
		return
	}
	see := s.visibility(r)
	m := s.gpuMap(see.can)
	if see.err != nil {
		authFailed(w, see.err)
		return
	}
	writeJSON(w, http.StatusOK, GPUs{Map: m, MIGLayouts: s.migLayouts()})
}

// gpuMap builds the GPU map with the usage of the namespaces visible does
// not accept anonymous. It reads the model under the lock and asks
// visible (which may ask Nomad) after it.
func (s *Service) gpuMap(visible func(ns string) bool) *gpumap.Map {
	s.mu.Lock()
	nodes, allocs := s.nodesNow(), s.liveAllocsNow()
	s.mu.Unlock()
	m := gpumap.Build(nodes, allocs)
	m.Hide(visible)
	return m
}

// nodesNow lists the model's nodes, for work done after the lock is
// released. The caller holds s.mu.
func (s *Service) nodesNow() []*api.Node {
	nodes := make([]*api.Node, 0, len(s.state.Nodes))
	for _, n := range s.state.Nodes {
		nodes = append(nodes, n)
	}
	return nodes
}

// liveAllocsNow lists the model's live allocations (model.Live), for work
// done after the lock is released. The caller holds s.mu.
func (s *Service) liveAllocsNow() []*api.Allocation {
	allocs := make([]*api.Allocation, 0, len(s.state.Allocs))
	for _, a := range s.state.Allocs {
		if model.Live(a) {
			allocs = append(allocs, a)
		}
	}
	return allocs
}

// JobStatus is the body of /v1/jobs/<id>.
type JobStatus struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// Type and Status are Nomad's (service/batch/...; pending, running or
	// dead: a batch job whose allocations all finished is dead).
	Type   string        `json:"type,omitempty"`
	Status string        `json:"status,omitempty"`
	Groups []GroupStatus `json:"groups"`
}

// GroupStatus says where a group is pinned, or why it waits.
type GroupStatus struct {
	Name      string      `json:"name"`
	State     string      `json:"state"` // "pinned", "pending" or "not-gpushare"
	Placement *pin.Record `json:"placement,omitempty"`
	Reason    string      `json:"reason,omitempty"`
	// Lifecycle is where the last pass found the group in its job's life
	// (lifecycle.State: template, waiting, pinned-unplaced, running,
	// scaling, canarying, migrating, done, ...) and LifecycleWhy why.
	Lifecycle    string   `json:"lifecycle,omitempty"`
	LifecycleWhy string   `json:"lifecycle_reason,omitempty"`
	Allocs       []string `json:"allocations,omitempty"`
	// Profile is the interference profile decisions use: declared in meta,
	// named, or learned from the group's stats while it ran alone.
	Profile *interference.Profile `json:"profile,omitempty"`
	// Unpaired says why the group was last moved off a GPU it shared.
	Unpaired *Unpaired `json:"unpaired,omitempty"`
}

func (s *Service) handleJob(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	id := r.PathValue("id")
	name := strings.TrimSuffix(model.JobKey(ns, ""), "/")
	// authorised first: the managed namespaces are said only to a caller
	// who may read the one it asked about
	if err := s.authorize(r, authScope{Namespace: name}); err != nil {
		authFailed(w, err)
		return
	}
	if managed := s.namespaces(); !managed.has(ns) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf(
			"namespace %s is not managed by this scheduler: it manages %s (nomad.namespaces); ask with ?namespace= one of those", name, managed)})
		return
	}
	// the answer is built under the lock and written after it: a slow
	// client never holds up scheduling
	out, found := s.jobStatus(ns, id, name)
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no job " + id + " in namespace " + name + " (use ?namespace=)"})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) jobStatus(ns, id, name string) (JobStatus, bool) {
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
		gs.Unpaired = s.unpairedOf(key)
		if st, ok := s.stages[key]; ok {
			gs.Lifecycle, gs.LifecycleWhy = string(st.State), st.Why
		}
		for _, a := range s.state.GroupAllocs(ns, id, *tg.Name) {
			gs.Allocs = append(gs.Allocs, a.ID)
		}
		switch rec, ok := s.state.Record(job, *tg.Name); {
		case model.Template(job):
			gs.State, gs.Reason = "template", "a periodic or parameterized job: Nomad never places it, and gpushare never decides it; each child it launches or dispatches is a job of its own, decided as it comes"
		case slices.Contains(gated, *tg.Name) || s.pending[key] != "": // a pin Nomad could not place, or whose capacity is gone, waits too
			gs.State = "pending"
			gs.Reason = s.pending[key]
			if _, never := s.refused[key]; never {
				gs.State = "refused"
			}
			if gs.Reason == "" {
				gs.Reason = "waiting for the next decision"
			}
		case ok:
			shown := *rec
			shown.Reason = s.why[key] // the meta says where, the records why
			gs.State, gs.Placement = "pinned", &shown
		}
		out.Groups = append(out.Groups, gs)
	}
	return out, true
}

// Waiting is one entry of /v1/groups: a group that waits, or that was
// refused for good, and why.
type Waiting struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Group     string `json:"group"`
	State     string `json:"state"` // "pending" or "refused"
	Reason    string `json:"reason"`
	// Position is the group's place in the queue of Of groups, when the
	// last decision queued it.
	Position int `json:"position,omitempty"`
	Of       int `json:"of,omitempty"`
}

// handleGroups lists the groups that wait or were refused for good, in
// the managed namespaces, sorted.
func (s *Service) handleGroups(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing listed before authentication
		authFailed(w, err)
		return
	}
	out := s.waiting()
	// only the namespaces the caller's token may read
	kept, ok := readableOnly(s, w, r, out, func(g Waiting) string { return g.Namespace })
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, kept)
}

// waiting lists the groups of managed namespaces that wait or were
// refused for good, sorted.
func (s *Service) waiting() []Waiting {
	managed := s.namespaces()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Waiting, 0, len(s.pending))
	for _, k := range slices.SortedFunc(maps.Keys(s.pending), decide.Key.Compare) {
		if !managed.has(k.Namespace) {
			continue
		}
		w := Waiting{Namespace: k.Namespace, Job: k.Job, Group: k.Group, State: "pending", Reason: s.pending[k]}
		if _, never := s.refused[k]; never {
			w.State = "refused"
		} else if p, ok := s.positions[k]; ok {
			w.Position, w.Of = p.Position, p.Of
		}
		out = append(out, w)
	}
	return out
}

// VC is one entry of /v1/vcs: a virtual cluster jobs may name in
// gpushare.vc, and the namespaces it admits (empty: all).
type VC struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces,omitempty"`
}

func (s *Service) handleVCs(w http.ResponseWriter, _ *http.Request) {
	out := make([]VC, 0, len(s.cfg.VCs))
	for _, v := range s.cfg.VCs {
		out = append(out, VC{Name: v.Name, Namespaces: v.Namespaces})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleProfiles lists the named interference profiles (built-in and
// configured) jobs may name in gpushare.profile.
func (s *Service) handleProfiles(w http.ResponseWriter, _ *http.Request) {
	out := make([]interference.Profile, 0, len(s.profile.Profiles))
	for _, name := range slices.Sorted(maps.Keys(s.profile.Profiles)) {
		out = append(out, s.profile.Profiles[name])
	}
	writeJSON(w, http.StatusOK, out)
}

// readableOnly keeps the items of the namespaces the caller's token may
// read (visibility: asking once per namespace); false means it answered
// the request with the authorisation error.
func readableOnly[T any](s *Service, w http.ResponseWriter, r *http.Request, items []T, namespace func(T) string) ([]T, bool) {
	see := s.visibility(r)
	kept := items[:0]
	for _, it := range items {
		if see.can(namespace(it)) {
			kept = append(kept, it)
		}
	}
	if see.err != nil {
		authFailed(w, see.err)
		return nil, false
	}
	return kept, true
}
