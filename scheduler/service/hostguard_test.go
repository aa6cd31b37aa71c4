package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoenig/test/must"
)

// apiRequest is httptest.NewRequest as a local client sends it: Host
// 127.0.0.1, the only kind of name the API answers on loopback.
func apiRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "127.0.0.1"
	return r
}

// On a loopback address the API answers only a loopback Host (localhost,
// 127.0.0.1, [::1], with or without a port) or a configured name: a web
// page whose own name resolves to 127.0.0.1 (DNS rebinding) gets 421 and
// nothing of the API. Beyond loopback, any Host (the token guards it).
func TestAPIOnLoopbackAnswersOnlyLoopbackHosts(t *testing.T) {
	cfg := config.Default()
	cfg.HTTPAddress = "127.0.0.1:8646"
	cfg.HTTPAllowedHosts = []string{"gpushare.internal"}
	h := (&httpAPI{cfg: cfg, log: hclog.NewNullLogger(), nomad: &fakeNomad{}, view: fakeView{h: Health{Status: "ok"}}, profile: interference.Default(),
		metrics: prometheus.NewRegistry(), now: time.Now, ns: managedNamespaces(nil)}).handler()
	for host, want := range map[string]int{
		"localhost:8646": 200, "127.0.0.1": 200, "[::1]:8646": 200, "LOCALHOST": 200, "gpushare.internal:8646": 200,
		"attacker.example:8646": 421, "example.com": 421, "": 421, "127.0.0.1.attacker.example": 421,
	} {
		for _, path := range []string{"/v1/health", "/v1/groups", "/ui"} {
			r := httptest.NewRequest("GET", path, nil)
			r.Host = host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if want == 421 {
				must.Eq(t, 421, w.Code, must.Sprintf("Host %q %s", host, path))
				must.StrContains(t, w.Body.String(), "http_allowed_hosts")
			} else {
				must.NotEq(t, 421, w.Code, must.Sprintf("Host %q %s", host, path))
			}
		}
	}
	cfg.HTTPAddress = "0.0.0.0:8646"
	r := httptest.NewRequest("GET", "/v1/health", nil)
	r.Host = "scheduler.example:8646"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	must.NotEq(t, 421, w.Code)
}
