package service

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpAPI serves the HTTP API and the web page (ui.go), checking callers'
// tokens with Nomad (auth.go). It reads what it shows through view, never
// the decision loop's fields.
type httpAPI struct {
	cfg   *config.Config
	log   hclog.Logger
	nomad authorizer
	view  view
	// profile holds the named interference profiles (configured once).
	profile *interference.Model
	metrics prometheus.Gatherer
	now     func() time.Time
	ns      namespaces
	// auth caches Nomad's answers about the callers' tokens.
	auth authCache
}

// authorizer asks Nomad whether a token may read a scope (auth.go).
type authorizer interface {
	Authorize(ctx context.Context, token string, scope authScope) error
}

var _ authorizer = nomadClient{}

// view is what the API and the page show, from the decision loop and the
// model (view.go). Each method reads under the model's lock and returns
// what it read: a slow client never holds up scheduling.
type view interface {
	health() Health
	// gpuMap is the GPU map, with the usage of the namespaces visible
	// does not accept anonymous (visible is asked after the lock).
	gpuMap(visible func(ns string) bool) *gpumap.Map
	migLayouts() []miglayout.Recommendation
	jobStatus(ns, id, name string) (JobStatus, bool)
	// waiting lists the groups of managed namespaces that wait or were
	// refused for good, sorted.
	waiting() []Waiting
	// unpaired is why each group was last unpaired; preemptionsLog the
	// groups last preempted, oldest first.
	unpaired() []Unpaired
	preemptionsLog() []Preemption
	// nodeNames names nodes by their name, else their ID.
	nodeNames(ids []string) []string
	// family is a job's parent and children, for its page (ui_family.go).
	family(ns, id string) jobFamily
}

// handler serves the HTTP API:
//
//	GET /v1/health          liveness, leadership and the model's index
//	GET /v1/gpus            the GPU map
//	GET /v1/history         each GPU's and each job's utilisation over the last hour
//	GET /v1/jobs/<id>       each gpushare group's placement, or why it waits (?namespace=)
//	GET /v1/groups          every group that waits or was refused for good, and why
//	GET /v1/vcs             the virtual clusters jobs may name in gpushare.vc
//	GET /v1/profiles        the interference profiles jobs may name in gpushare.profile
//	GET /v1/unpairs         the groups last moved off a GPU they shared, and why
//	GET /v1/preemptions     the groups last preempted for a guaranteed one
//	GET /metrics            Prometheus metrics
//	GET /ui                 the web page (ui.go); / redirects there
func (s *httpAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", s.handleHealth)
	mux.HandleFunc("GET /v1/gpus", s.handleGPUs)
	mux.HandleFunc("GET /v1/history", s.handleHistory)
	mux.HandleFunc("GET /v1/jobs/{id}", s.handleJob)
	mux.HandleFunc("GET /v1/groups", s.handleGroups)
	mux.HandleFunc("GET /v1/vcs", s.handleVCs)
	mux.HandleFunc("GET /v1/profiles", s.handleProfiles)
	mux.HandleFunc("GET /v1/unpairs", s.handleUnpairs)
	mux.HandleFunc("GET /v1/preemptions", s.handlePreemptions)
	s.uiRoutes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.HostAllowed(r.Host) {
			// a page of another site whose name resolves to 127.0.0.1 (DNS
			// rebinding) would otherwise read the API as a local program
			http.Error(w, fmt.Sprintf("the gpushare API listens on loopback and answers Host localhost or a loopback address, not %q; add the name to http_allowed_hosts to allow it", r.Host), http.StatusMisdirectedRequest)
			return
		}
		mux.ServeHTTP(w, r)
	})
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
	// Decided is the index of the model the last finished pass decided
	// on (its pins sent): everything Nomad did up to it has been decided
	// on.
	Decided uint64 `json:"decided"`
	Nodes   int    `json:"nodes"`
	Jobs    int    `json:"jobs"`
	// GateOpen are the nodes whose meta sets gpushare_gate = pending:
	// Nomad places gated groups there by itself (gateopen.go).
	GateOpen []string `json:"gate_open,omitempty"`
}

func (s *httpAPI) handleHealth(w http.ResponseWriter, _ *http.Request) {
	h := s.view.health()
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
func (s *httpAPI) handleGPUs(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{Nodes: true}); err != nil {
		authFailed(w, err)
		return
	}
	see := s.visibility(r)
	m := s.view.gpuMap(see.can)
	if see.err != nil {
		authFailed(w, see.err)
		return
	}
	writeJSON(w, http.StatusOK, GPUs{Map: m, MIGLayouts: s.view.migLayouts()})
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
	// Expected is the run time the queue orders the group by, when one is
	// known: declared in gpushare.expected_runtime, or learned from its
	// family's finished runs (model/runs.go).
	Expected *ExpectedRuntime `json:"expected_runtime,omitempty"`
	// Unpaired says why the group was last moved off a GPU it shared.
	Unpaired *Unpaired `json:"unpaired,omitempty"`
	// Elastic, for a group that opted in (gpushare.elastic), says whether
	// gpushare grows and shrinks it, why it last did, and why it does
	// or does not now.
	Elastic *ElasticStatus `json:"elastic,omitempty"`
	// Timeslice, for a time-sliced group's allocations (gpushare.timeslice),
	// is each one's quantum, suspended time and turns (timeslice.go).
	Timeslice []AllocTimeslice `json:"timeslice,omitempty"`
}

// ExpectedRuntime is a group's run time as the queue knows it.
type ExpectedRuntime struct {
	Seconds float64 `json:"seconds"`
	// Source is "declared" (gpushare.expected_runtime) or "learned".
	Source string `json:"source"`
	// Runs is how many finished runs a learned one is the median of.
	Runs int `json:"runs,omitempty"`
}

// String says the run time and where it comes from, as the CLI and the
// page show it.
func (e ExpectedRuntime) String() string {
	d := time.Duration(e.Seconds * float64(time.Second)).Round(time.Second)
	switch {
	case e.Source == "learned" && e.Runs == 1:
		return fmt.Sprintf("%s, learned: what its last run took", d)
	case e.Source == "learned":
		return fmt.Sprintf("%s, learned: the median of its last %d runs", d, e.Runs)
	}
	return fmt.Sprintf("%s, declared (gpushare.expected_runtime)", d)
}

func (s *httpAPI) handleJob(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	id := r.PathValue("id")
	name := strings.TrimSuffix(model.JobKey(ns, ""), "/")
	// authorised first: the managed namespaces are said only to a caller
	// who may read the one it asked about
	if err := s.authorize(r, authScope{Namespace: name}); err != nil {
		authFailed(w, err)
		return
	}
	if managed := s.ns; !managed.has(ns) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf(
			"namespace %s is not managed by this scheduler: it manages %s (nomad.namespaces); ask with ?namespace= one of those", name, managed)})
		return
	}
	// the answer is built under the lock and written after it: a slow
	// client never holds up scheduling
	out, found := s.view.jobStatus(ns, id, name)
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no job " + id + " in namespace " + name + " (use ?namespace=)"})
		return
	}
	writeJSON(w, http.StatusOK, out)
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
func (s *httpAPI) handleGroups(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing listed before authentication
		authFailed(w, err)
		return
	}
	out := s.view.waiting()
	// only the namespaces the caller's token may read
	kept, ok := readableOnly(s, w, r, out, func(g Waiting) string { return g.Namespace })
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, kept)
}

// VC is one entry of /v1/vcs: a virtual cluster jobs may name in
// gpushare.vc, and the namespaces it admits (empty: all).
type VC struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces,omitempty"`
}

func (s *httpAPI) handleVCs(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // as /v1/groups: a token Nomad knows
		authFailed(w, err)
		return
	}
	out := make([]VC, 0, len(s.cfg.VCs))
	for _, v := range s.cfg.VCs {
		out = append(out, VC{Name: v.Name, Namespaces: v.Namespaces})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleProfiles lists the named interference profiles (built-in and
// configured) jobs may name in gpushare.profile.
func (s *httpAPI) handleProfiles(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil {
		authFailed(w, err)
		return
	}
	out := make([]interference.Profile, 0, len(s.profile.Profiles))
	for _, name := range slices.Sorted(maps.Keys(s.profile.Profiles)) {
		out = append(out, s.profile.Profiles[name])
	}
	writeJSON(w, http.StatusOK, out)
}

// readableOnly keeps the items of the namespaces the caller's token may
// read (visibility: asking once per namespace); false means it answered
// the request with the authorisation error.
func readableOnly[T any](s *httpAPI, w http.ResponseWriter, r *http.Request, items []T, namespace func(T) string) ([]T, bool) {
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

// preemptionsFor lists the recent preemptions the caller may see, newest
// first: those of namespaces it may read, the group they were for named
// only when it may read that one's namespace too.
func (s *httpAPI) preemptionsFor(see *visibility) []Preemption {
	all := s.view.preemptionsLog()
	out := make([]Preemption, 0, len(all))
	for _, p := range slices.Backward(all) {
		if !see.can(p.Namespace) {
			continue
		}
		if !see.can(p.forNamespace) {
			p.For = ""
		}
		out = append(out, p)
	}
	return out
}

// handlePreemptions lists the groups last preempted, newest first, in the
// namespaces the caller may read.
func (s *httpAPI) handlePreemptions(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing listed before authentication
		authFailed(w, err)
		return
	}
	see := s.visibility(r)
	out := s.preemptionsFor(see)
	if see.err != nil {
		authFailed(w, see.err)
		return
	}
	slices.SortStableFunc(out, func(a, b Preemption) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Job, b.Job)
	})
	writeJSON(w, http.StatusOK, out)
}

// handleUnpairs lists the groups last unpaired, newest first, in the
// namespaces the caller may read.
func (s *httpAPI) handleUnpairs(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing listed before authentication
		authFailed(w, err)
		return
	}
	out := slices.DeleteFunc(s.view.unpaired(), func(u Unpaired) bool { return !s.ns.has(u.Namespace) })
	kept, ok := readableOnly(s, w, r, out, func(u Unpaired) string { return u.Namespace })
	if !ok {
		return
	}
	slices.SortFunc(kept, func(a, b Unpaired) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Job, b.Job)
	})
	writeJSON(w, http.StatusOK, kept)
}
