package service

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoenig/test/must"
)

// stuckWriter is an HTTP client that stops reading: Write blocks until
// released.
type stuckWriter struct {
	header  http.Header
	writing chan struct{}
	release chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	select {
	case w.writing <- struct{}{}:
	default:
	}
	<-w.release
	return len(b), nil
}

// A client that stops reading an answer never holds up scheduling: every
// endpoint builds its answer under the lock and writes it after.
func TestSlowHTTPClientDoesNotBlockScheduling(t *testing.T) {
	for _, path := range []string{"/v1/jobs/waiting", "/v1/groups", "/v1/gpus", "/v1/health", "/metrics"} {
		t.Run(path, func(t *testing.T) {
			f := busyDGX1(t)
			f.put(gated("waiting", 25))
			s := newTestService(t, f)
			s.loop.reconcile(t.Context())
			w := &stuckWriter{header: http.Header{}, writing: make(chan struct{}, 1), release: make(chan struct{})}
			served := make(chan struct{})
			go func() {
				defer close(served)
				s.Handler().ServeHTTP(w, apiRequest("GET", path, nil))
			}()
			select {
			case <-w.writing:
			case <-time.After(time.Minute): // liveness only
				t.Fatal("the handler never wrote")
			}
			passed := make(chan struct{})
			go func() {
				defer close(passed)
				s.loop.reconcile(t.Context())
			}()
			select {
			case <-passed:
			case <-time.After(time.Minute): // liveness only
				t.Error("a pass waited for a client that stopped reading")
			}
			close(w.release)
			<-served
			<-passed
			must.MapContainsKey(t, s.loop.answers.pending, key("big"))
		})
	}
}

// fakeView is a view with fixed answers: the API alone, without a loop.
type fakeView struct {
	h      Health
	groups []Waiting
	jobs   map[string]JobStatus
}

func (v fakeView) health() Health                          { return v.h }
func (v fakeView) gpuMap(func(ns string) bool) *gpumap.Map { return gpumap.Build(nil, nil) }
func (v fakeView) migLayouts() []miglayout.Recommendation  { return nil }
func (v fakeView) waiting() []Waiting                      { return v.groups }
func (v fakeView) unpaired() []Unpaired                    { return nil }
func (v fakeView) preemptionsLog() []Preemption            { return nil }
func (v fakeView) nodeNames(ids []string) []string         { return ids }
func (v fakeView) family(string, string) jobFamily         { return jobFamily{} }
func (v fakeView) jobStatus(ns, id, _ string) (JobStatus, bool) {
	st, ok := v.jobs[model.JobKey(ns, id)]
	return st, ok
}

// The API shows what its view gives, and nothing of its own: a model not
// yet listed is "starting", a waiting group is listed with its reason.
func TestAPIShowsWhatItsViewGives(t *testing.T) {
	v := fakeView{h: Health{Status: "ok", Index: 7}, groups: []Waiting{{Namespace: "default", Job: "a", Group: "g", State: "pending", Reason: "no room"}},
		jobs: map[string]JobStatus{model.JobKey("default", "a"): {Namespace: "default", ID: "a"}}}
	a := &httpAPI{cfg: config.Default(), log: hclog.NewNullLogger(), nomad: &fakeNomad{}, view: v, profile: interference.Default(),
		metrics: prometheus.NewRegistry(), now: time.Now, ns: managedNamespaces(nil)}
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		a.handler().ServeHTTP(w, apiRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	code, body := get("/v1/health")
	must.Eq(t, http.StatusServiceUnavailable, code)
	must.StrContains(t, body, `"status": "starting"`)
	code, body = get("/v1/groups")
	must.Eq(t, http.StatusOK, code)
	must.StrContains(t, body, `"reason": "no room"`)
	code, _ = get("/v1/jobs/a")
	must.Eq(t, http.StatusOK, code)
	code, _ = get("/v1/jobs/b")
	must.Eq(t, http.StatusNotFound, code)
}
