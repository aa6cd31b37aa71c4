package service

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The unhappy paths of a placed job's life: what must not move, and what
// must say why it waits.

// A changed version deployed with a canary on a cluster with no room
// beside what runs: Nomad keeps the old allocation running and the canary
// unplaced; gpushare pins nothing (a pin onto the running shares would
// never be placed, and the deployment would hang), counts no restart, and
// the group says why it waits.
func TestCanaryWithNoRoomWaitsAndMovesNothing(t *testing.T) {
	f, s, rec := placedFirst(t, withCanary("api", 800)) // the whole DGX-1
	f.runningOn("api", "alloc-v1", rec.Shares)
	registers := f.registers

	changed := withCanary("api", 800)
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": "2"}
	f.put(changed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())

	must.Eq(t, registers, f.registers, must.Sprint("no pin was written"))
	must.SliceNotEmpty(t, pin.Gated(f.jobs["api"]), must.Sprint("the new version still waits at the gate"))
	st := stageOf(s, "api")
	must.Eq(t, lifecycle.Canarying, st.State, must.Sprint(st.Why))
	why := s.loop.answers.pending[key("api")]
	must.StrContains(t, why, "canaries, which need room beside the running allocations", must.Sprint(why))
	must.StrContains(t, why, "needs 8 free GPUs")
	must.Zero(t, restarts(t, s))
}

// Scaled past its pin while the GPU its running allocation holds is
// unhealthy: the new pin takes no share of that GPU (Nomad could never
// place an allocation on it), and the running allocation's restart is
// counted.
func TestScaleWithTheRunningGPUUnhealthy(t *testing.T) {
	f, s, rec := placedFirst(t, gated("web", 25))
	f.runningOn("web", "alloc-1", rec.Shares)
	bad := markUnhealthy(t, f.nodes[0], gpuIndex(t, f, rec.GPUs[0]))
	must.Eq(t, rec.GPUs[0], bad)

	f.scaled(t, "web", 3)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("web")]))
	must.Eq(t, 3, grown.Count)
	for _, sh := range grown.Shares {
		must.False(t, strings.HasPrefix(sh, bad+":"), must.Sprintf("share %s of the unhealthy GPU pinned", sh))
	}
	must.Positive(t, restarts(t, s))
}

// restarts sums gpushare_restarts_total over its reasons.
func restarts(t *testing.T, s *Service) float64 {
	t.Helper()
	total := 0.0
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rr.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "gpushare_restarts_total{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			f, err := strconv.ParseFloat(v, 64)
			must.NoError(t, err)
			total += f
		}
	}
	return total
}

// gpuIndex is the index of GPU uuid on the fake's first node.
func gpuIndex(t *testing.T, f *fakeNomad, uuid string) int {
	t.Helper()
	n, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	for i, g := range n.GPUs {
		if g.UUID == uuid {
			return i
		}
	}
	t.Fatalf("no GPU %s", uuid)
	return -1
}

// /v1/health says up to which index of Nomad's the last finished pass
// decided (what tests and operators wait on instead of time): nothing
// before the first pass, the model's index after it, and a pass that
// has yet to run after new events leaves it behind the model's.
func TestHealthSaysWhatTheLastPassDecidedOn(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("web", 25))
	s := loadedService(t, f)
	must.Zero(t, s.view.health().Decided)
	s.loop.reconcile(t.Context())
	h := s.view.health()
	must.Positive(t, h.Decided)
	must.Eq(t, h.Index, h.Decided)
	f.put(gated("api", 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	h = s.view.health()
	must.Less(t, h.Index, h.Decided, must.Sprint("the new job is not decided on yet"))
	s.loop.reconcile(t.Context())
	must.Eq(t, s.view.health().Index, s.view.health().Decided)
}

// placingNomad is the fake Nomad whose registration is placed at once,
// the allocation's event reaching the model before the registration's
// answer is read (placed): as on a quiet cluster.
type placingNomad struct {
	*fakeNomad
	placed *func(j *api.Job, index uint64)
}

func (p placingNomad) Register(ctx context.Context, j *api.Job, index uint64) (uint64, error) {
	idx, err := p.fakeNomad.Register(ctx, j, index)
	if err == nil && *p.placed != nil {
		(*p.placed)(j, idx)
	}
	return idx, err
}

// A pin's own allocation, placed and seen before the pin is counted, is
// not a running allocation the pin replaces: no restart is counted or
// said (the churn run's "the pin makes Nomad replace" warnings named such
// allocations). One that ran before the registration still is.
func TestAPinsOwnAllocationIsNotARestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		created  func(registered uint64) uint64
		restarts float64
	}{
		{"created by the registration", func(r uint64) uint64 { return r + 1 }, 0},
		{"running before it", func(r uint64) uint64 { return r - 1 }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			f.put(gated("quarter", 25))
			var s *Service
			placed := func(j *api.Job, registered uint64) {
				must.Positive(t, registered)
				idx := tc.created(registered)
				s.mu.Lock()
				s.state.PutAlloc(&api.Allocation{ID: "alloc-1", Namespace: "default", JobID: *j.ID, TaskGroup: "g", NodeID: "node-1",
					DesiredStatus: "run", ClientStatus: "running", CreateIndex: idx, ModifyIndex: idx})
				s.mu.Unlock()
			}
			var err error
			s, err = newService(config.Default(), hclog.NewNullLogger(), placingNomad{fakeNomad: f, placed: &placed}, func() time.Time { return time.Unix(1000, 0) })
			must.NoError(t, err)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			_, pinned := pin.ParseRecord(f.jobs["quarter"], "g")
			must.True(t, pinned, must.Sprint(s.loop.answers.pending[key("quarter")]))
			must.Eq(t, tc.restarts, restarts(t, s))
		})
	}
}
