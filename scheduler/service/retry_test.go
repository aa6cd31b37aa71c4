package service

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A pin Nomad refuses (a token without submit-job) gives one clear reason
// and is retried with backoff — 2 s, 4 s, 8 s... — not on every pass; the
// first success forgets the failures.
func TestRefusedPinBacksOff(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	f.registerErr = errors.New("Unexpected response code: 403 (Permission denied)")
	now := time.Unix(1000, 0)
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return now })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	attempts := func() int { return f.registers }
	pass := func(after time.Duration) {
		now = now.Add(after)
		s.loop.reconcile(t.Context())
	}
	pass(0)
	must.Eq(t, 1, attempts())
	must.StrContains(t, s.loop.answers.pending[key("x")], "permission denied: the scheduler's token needs register-job (or submit-job) in namespace default")
	must.StrContains(t, s.loop.answers.pending[key("x")], "deploy/nomad/gpushare-scheduler.policy.hcl")
	must.StrContains(t, s.loop.answers.pending[key("x")], "retrying in 2s")
	for range 5 { // passes every 300 ms within the 2 s
		pass(300 * time.Millisecond)
	}
	must.Eq(t, 1, attempts())
	pass(600 * time.Millisecond) // 2.1 s after the failure
	must.Eq(t, 2, attempts())
	must.StrContains(t, s.loop.answers.pending[key("x")], "retrying in 4s")
	pass(3 * time.Second)
	must.Eq(t, 2, attempts())
	f.registerErr = nil // the operator fixed the token's policy
	pass(2 * time.Second)
	must.Eq(t, 3, attempts())
	must.SliceEmpty(t, pin.Gated(f.jobs["x"]))
	must.MapEmpty(t, s.loop.refusals.retries)
}

// A hung Nomad request does not stall scheduling: the pass gives up after
// nomad.request_timeout (the registration ends with its request's
// deadline; the test's own context has none) and the group is retried
// with backoff.
func TestHungRequestTimesOut(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, hang: true}
	f.put(gated("x", 25))
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "200ms"
	s, err := newService(cfg, hclog.NewNullLogger(), f, time.Now)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	returns(t, "the pass", func() { s.loop.reconcile(t.Context()) })
	must.StrContains(t, s.loop.answers.pending[key("x")], "context deadline exceeded; retrying in 2s")
}

// returns runs f and fails the test if it has not returned within a few
// minutes: a liveness bound only, not a measure of how long f took.
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not return", what)
	}
}

// One blocked call does not stop the other groups: the pin of "stuck"
// hangs until nomad.request_timeout, then "free" is pinned in the same
// pass.
func TestBlockedPinDoesNotStopOthers(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, hangJob: "stuck"}
	stuck := gated("stuck", 25)
	stuck.SubmitTime = ptr(int64(1)) // first in the queue
	f.put(stuck)
	f.put(gated("free", 25))
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "300ms"
	s, err := newService(cfg, hclog.NewNullLogger(), f, time.Now)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["free"]))
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["stuck"]))
	must.StrContains(t, s.loop.answers.pending[key("stuck")], "deadline exceeded")
}

func TestRetriedReads(t *testing.T) {
	calls := 0
	err := retried(t.Context(), func() error {
		calls++
		if calls < 3 {
			return errors.New("connection reset by peer")
		}
		return nil
	})
	must.NoError(t, err)
	must.Eq(t, 3, calls)
	calls = 0
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	must.Error(t, retried(ctx, func() error { calls++; return errors.New("down") }))
	must.Eq(t, 1, calls)
}

// notFoundNomad answers every read of a job it no longer has as Nomad
// does: an HTTP 404.
type notFoundNomad struct {
	*fakeNomad
	notFound error
}

func (n notFoundNomad) Job(ctx context.Context, ns, id string) (*api.Job, error) {
	n.mu.Lock()
	_, ok := n.jobs[id]
	n.mu.Unlock()
	if !ok {
		return nil, n.notFound
	}
	return n.fakeNomad.Job(ctx, ns, id)
}

// A job purged after it was decided and before its pin (a finished batch
// job, a pipeline's purge; 71 "cannot pin the placement" errors in the
// 10,000-job churn run) is not an error: nothing to pin, nothing to retry,
// and the other jobs of the pass are pinned.
func TestAJobPurgedBeforeItsPinIsNotAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "job not found", http.StatusNotFound)
	}))
	defer srv.Close()
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)
	_, _, notFound := c.Jobs().Info("gone", nil) // Nomad's own 404
	must.True(t, isNotFound(notFound))

	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("gone", 25))
	f.put(gated("x", 25))
	var logs strings.Builder
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	s, err := newService(config.Default(), log, notFoundNomad{f, notFound}, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	f.mu.Lock()
	delete(f.jobs, "gone") // purged; its event has not come yet
	f.mu.Unlock()
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["x"]))
	must.StrContains(t, s.loop.answers.pending[key("gone")], "the job is gone")
	must.MapEmpty(t, s.loop.refusals.retries)
	must.StrNotContains(t, logs.String(), "[ERROR]")
	must.StrContains(t, logs.String(), "the job is gone since it was decided")
}
