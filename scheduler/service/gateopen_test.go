package service

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A client that sets meta gpushare_gate = pending satisfies the gate: the
// scheduler says so in the log, the gauge and /v1/health as soon as it
// lists or hears of the node, and takes it back when the meta goes.
func TestANodeThatOpensTheGateIsReported(t *testing.T) {
	open, shut := dgx1As(t, "n1", "dc1"), dgx1As(t, "n2", "dc1")
	open.Meta["gpushare_gate"] = "pending"
	shut.Meta["gpushare_gate"] = "closed" // any other value satisfies nothing
	f := &fakeNomad{nodes: []*api.Node{open, shut}, jobs: map[string]*api.Job{}}
	var logs bytes.Buffer
	s, err := newService(config.Default(), hclog.New(&hclog.LoggerOptions{Output: &logs}), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, []string{"dgx1-n1"}, s.view.health().GateOpen)
	must.StrContains(t, scrape(t, s), "\ngpushare_gate_open_nodes 1\n")
	must.StrContains(t, logs.String(), `a node sets the meta key gpushare_gate to "pending"`)
	must.StrContains(t, logs.String(), "node=dgx1-n1")

	// the second node opens it too (a node event), the first closes it
	shut.Meta["gpushare_gate"] = "pending"
	delete(open.Meta, "gpushare_gate")
	for _, id := range []string{"n1", "n2"} {
		must.NoError(t, s.watcher.applyNode(t.Context(), api.Event{Topic: api.TopicNode, Type: "NodeRegistration", Key: id, Index: 100}))
	}
	must.Eq(t, []string{"dgx1-n2"}, s.view.health().GateOpen)
	must.StrContains(t, scrape(t, s), "\ngpushare_gate_open_nodes 1\n")
	must.Eq(t, 2, strings.Count(logs.String(), "[ERROR] scheduler: a node sets the meta key gpushare_gate"))

	// the node deregistered: nothing opens it
	f.nodes = f.nodes[:1]
	must.NoError(t, s.watcher.applyNode(t.Context(), api.Event{Topic: api.TopicNode, Type: "NodeDeregistration", Key: "n2", Index: 101}))
	must.SliceEmpty(t, s.view.health().GateOpen)
	must.StrContains(t, scrape(t, s), "\ngpushare_gate_open_nodes 0\n")
}

// scrape reads the service's /metrics.
func scrape(t *testing.T, s *Service) string {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	return rr.Body.String()
}
