package service

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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
				s.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
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
			must.MapContainsKey(t, s.loop.pending, key("big"))
		})
	}
}
