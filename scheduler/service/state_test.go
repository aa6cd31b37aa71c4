package service

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// loadedService is newTestService with the scheduler's records read from
// the fake's Variables, as a leader does before its first pass.
func loadedService(t *testing.T, f *fakeNomad) *Service {
	t.Helper()
	return loadedServiceWith(t, f, config.Default())
}

// loadedServiceWith is loadedService of the given config.
func loadedServiceWith(t *testing.T, f *fakeNomad, cfg *config.Config) *Service {
	t.Helper()
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	must.NoError(t, s.records.loadSecret(t.Context(), true))
	must.NoError(t, s.records.loadState(t.Context(), true))
	return s
}

// A gpushare.placement a user wrote by hand on a job the service never
// pinned holds no shares: all 800 shares of the DGX-1 "pinned" that way
// do not keep a gated 8-GPU job from being placed.
func TestForgedPlacementHoldsNothing(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	var shares, gpus []string
	for _, g := range node.GPUs {
		gpus = append(gpus, g.UUID)
		for k := range 100 {
			shares = append(shares, devicefn.ShareID{UUID: g.UUID, Index: k}.String())
		}
	}
	forged := gated("forged", 800)
	_, err = pin.Pin(forged, "g", &placement.Decision{Policy: "gpushare",
		Placements: []placement.Placement{{Node: node.ID, GPUs: gpus, Shares: shares}}})
	must.NoError(t, err)
	forged.Type = ptr("batch")
	f.put(forged)
	honest := gated("honest", 800)
	honest.SubmitTime = ptr(int64(1)) // first in the queue
	f.put(honest)

	trusting := newTestService(t, f) // records never loaded: every placement counts
	b := trusting.state.Snapshot(nil, nil)
	must.MapNotEmpty(t, b.HeldFor) // the forged record would hold the node

	s := loadedService(t, f)
	must.MapEmpty(t, s.state.Snapshot(nil, nil).HeldFor)
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["honest"], "g")
	must.True(t, ok)
	must.SliceEmpty(t, pin.Gated(f.jobs["honest"]))
	must.SliceLen(t, 8, rec.GPUs)
}

// The records survive a failover: a new replica trusts the placements the
// old leader wrote (and pins them no second time), shows its reasons
// before its own first pass, and keeps the profiles it learned.
func TestRecordsSurviveAFailover(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "b", []int{0}, 0, "2h")
	f.put(gated("x", 25))
	f.put(gated("big", 800))
	old := loadedService(t, f)
	old.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["x"], "g")
	must.True(t, ok)
	version := *f.jobs["x"].Version
	old.mu.Lock()
	old.state.Learn("default/x/g", interference.Profile{Name: "learned", SM: 0.42, MemBW: 0.17})
	old.mu.Unlock()
	old.records.saveState(t.Context())
	must.MapContainsKey(t, f.vars, "gpushare/state/learned")

	next := loadedService(t, f)
	must.StrContains(t, next.loop.answers.pending[key("big")], "position")
	must.Eq(t, interference.Profile{Name: "learned", SM: 0.42, MemBW: 0.17}, next.state.Learned["default/x/g"])
	_, trusted := next.state.Record(f.jobs["x"], "g")
	must.True(t, trusted)
	next.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["x"].Version) // not pinned again

	// unchanged records are not written again
	writes := f.varWrites
	next.records.saveState(t.Context())
	must.Eq(t, writes, f.varWrites)
	// a purged job's records go
	delete(f.jobs, "x")
	next.mu.Lock()
	next.state.DeleteJob("default", "x")
	next.mu.Unlock()
	next.records.saveState(t.Context())
	for _, v := range f.vars["gpushare/state/learned"] {
		must.StrNotContains(t, v, "default/x/g")
	}
}

// A signed placement copied onto another job does not verify: the
// signature covers the group.
func TestCopiedPlacementDoesNotVerify(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	x := f.jobs["x"]
	must.NotEq(t, "", x.TaskGroups[0].Meta[pin.MetaSignature])
	_, ok := s.state.Record(x, "g")
	must.True(t, ok)
	copied := gated("y", 25)
	copied.TaskGroups[0].Constraints = x.TaskGroups[0].Constraints
	copied.TaskGroups[0].Meta = x.TaskGroups[0].Meta
	f.put(copied)
	_, ok = s.state.Record(f.jobs["y"], "g")
	must.False(t, ok)
}

// gpushare.vc must name a configured virtual cluster, and one bound to
// namespaces admits only their jobs.
func TestVirtualClusterClaims(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	for _, j := range []struct{ id, ns, vc string }{
		{"unknown", "default", "nobody"}, {"outsider", "team-b", "research"}, {"member", "team-a", "research"},
	} {
		job := gated(j.id, 100)
		job.Namespace = ptr(j.ns)
		job.Meta[pin.MetaVC] = j.vc
		f.put(job)
	}
	s := withConfig(t, f, func(c *config.Config) {
		c.VCs = []config.VirtualCluster{{Name: "research", Namespaces: []string{"team-a"}, Cells: []config.Cell{{GPUs: 2, Count: 1}}}}
	})
	must.StrContains(t, s.loop.answers.pending[decide.Key{Namespace: "default", Job: "unknown", Group: "g"}], `gpushare.vc = "nobody" names no virtual cluster of this scheduler (it has: research)`)
	must.StrContains(t, s.loop.answers.pending[decide.Key{Namespace: "team-b", Job: "outsider", Group: "g"}], `virtual cluster "research" is bound to namespaces team-a; a job of namespace team-b cannot claim it`)
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["unknown"]))
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["outsider"]))
	must.SliceEmpty(t, pin.Gated(f.jobs["member"]))
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/vcs", nil))
	must.StrContains(t, rr.Body.String(), `"namespaces": [`)
}

// What the service keeps per group goes with the group's job: refusals,
// retries and learned profiles of purged jobs are dropped, so its maps
// stay bounded as jobs churn.
func TestRecordsOfPurgedJobsGo(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("huge", 1600))
	f.put(gated("x", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	s.mu.Lock()
	s.state.Learn("default/x/g", interference.Profile{Name: "learned", SM: 0.3, MemBW: 0.2})
	s.loop.refusals.retries[key("x")] = retry{at: time.Unix(2000, 0)}
	s.mu.Unlock()
	must.MapLen(t, 1, s.loop.refusals.forGood)
	for _, id := range []string{"huge", "x"} {
		delete(f.jobs, id)
		s.mu.Lock()
		s.state.DeleteJob("default", id)
		s.mu.Unlock()
	}
	s.loop.reconcile(t.Context())
	must.MapEmpty(t, s.loop.refusals.forGood)
	must.MapEmpty(t, s.loop.refusals.retries)
	must.MapEmpty(t, s.state.Learned)
	must.MapEmpty(t, s.loop.answers.pending)
}
