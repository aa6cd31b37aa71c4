package service

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// groupsOf is what /v1/groups says.
func groupsOf(t *testing.T, s *Service) map[string]Waiting {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/groups", nil))
	must.EqOp(t, 200, rr.Code, must.Sprint(rr.Body.String()))
	var list []Waiting
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &list))
	out := map[string]Waiting{}
	for _, g := range list {
		out[g.Job] = g
	}
	return out
}

// metricsOf is the scheduler's /metrics text.
func metricsOf(t *testing.T, s *Service) string {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	return rr.Body.String()
}

// Nothing waits in silence: a gated group asking for 0 shares (which Nomad
// accepts and then blocks for ever) is refused with its reason, not pinned
// as "cpu-only"; a group naming an undefined virtual cluster waits; both
// are in /v1/groups and in the metrics, whose every outcome is a series
// from the start. A gated group scaled to 0 is neither.
func TestNothingWaitsInSilence(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("zero", 0))
	vc := gated("novc", 25)
	vc.Meta["gpushare.vc"] = "nowhere"
	f.put(vc)
	scaled := gated("scaled", 25)
	scaled.TaskGroups[0].Count = ptr(0)
	f.put(scaled)
	f.put(gated("fine", 25))
	s := newTestService(t, f)
	m := metricsOf(t, s)
	for _, o := range []string{"placed", "refused", "never"} {
		must.StrContains(t, m, `gpushare_decisions_total{outcome="`+o+`"} 0`)
	}
	s.loop.reconcile(t.Context())

	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["zero"]), must.Sprint("a request of zero devices was pinned"))
	_, pinned := pin.ParseRecord(f.jobs["zero"], "g")
	must.False(t, pinned)
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["scaled"]))
	must.SliceEmpty(t, pin.Gated(f.jobs["fine"]))

	gs := groupsOf(t, s)
	must.MapLen(t, 2, gs, must.Sprint(gs))
	must.EqOp(t, "refused", gs["zero"].State)
	must.StrContains(t, gs["zero"].Reason, "count = 0: Nomad cannot place a request of zero devices")
	must.EqOp(t, "pending", gs["novc"].State)
	must.StrContains(t, gs["novc"].Reason, `gpushare.vc = "nowhere" names no virtual cluster`)

	m = metricsOf(t, s)
	must.StrContains(t, m, "gpushare_pending_groups 1\n")
	must.StrContains(t, m, "gpushare_refused_groups 1\n")

	// a refused request stays refused, with its reason, pass after pass,
	// until the job changes
	s.loop.reconcile(t.Context())
	must.EqOp(t, "refused", groupsOf(t, s)["zero"].State)
	fixed := gated("zero", 10)
	fixed.JobModifyIndex = ptr(uint64(99))
	f.put(fixed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["zero"]))
	m = metricsOf(t, s)
	must.StrContains(t, m, "gpushare_refused_groups 0\n")
	must.True(t, strings.Contains(m, `gpushare_decisions_total{outcome="placed"} 2`), must.Sprint(m))
}

// A request no node could ever hold because it is malformed (150 shares of
// 100-share GPUs) is told to change the request, not to add nodes.
func TestAnInvalidRequestIsNotToldToAddNodes(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("odd", 150))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	g := groupsOf(t, s)["odd"]
	must.EqOp(t, "refused", g.State)
	must.StrContains(t, g.Reason, "nor whole GPUs (a multiple of 100): ask for 100 or 200; this cluster can never hold it: change the request")
	must.StrNotContains(t, g.Reason, "add nodes")
}

// A group asking for a GPU model the cluster does not have is told which
// gpushare devices the cluster has.
func TestAnUnknownModelListsTheClustersModels(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	j := gated("t4", 100)
	j.TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpushare/Tesla T4"
	f.put(j)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	g := groupsOf(t, s)["t4"]
	must.StrContains(t, g.Reason, "missing devices (1)")
	must.StrContains(t, g.Reason, "the cluster's gpushare devices: nvidia/gpushare/Tesla V100-SXM2-16GB")
}

// /v1/jobs says Nomad's type and status of the job, so that a finished
// batch job is not shown as if it still held its pin.
func TestJobStatusSaysTheJobFinished(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	j := gated("done", 25)
	j.Type, j.Status = ptr("batch"), ptr("dead")
	f.put(j)
	s := newTestService(t, f)
	st, ok := s.view.jobStatus("default", "done", "default")
	must.True(t, ok)
	must.EqOp(t, "batch", st.Type)
	must.EqOp(t, "dead", st.Status)
}

// An allocation holding shares outside its group's pin is warned about
// once, with how many shares, not once per share.
func TestSharesOutsideThePinAreOneLine(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("w", 50))
	var logs strings.Builder
	s, err := newService(config.Default(), hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["w"], "g")
	must.True(t, ok)
	// its allocation appears on 50 other shares
	var other []string
	for i := 0; len(other) < 50; i++ {
		sh := fmt.Sprintf("%s:%d", rec.GPUs[0], i)
		if !slices.Contains(rec.Shares, sh) {
			other = append(other, sh)
		}
	}
	f.runningOn("w", "w-0", other)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.EqOp(t, 1, strings.Count(logs.String(), "shares outside its pin"), must.Sprint(logs.String()))
	must.StrContains(t, logs.String(), "shares_outside=50")
}
