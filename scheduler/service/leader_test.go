package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fakeLocker is a leader lock whose answers a test sets.
type fakeLocker struct {
	mu       sync.Mutex
	acquire  error
	renew    func(ctx context.Context) error
	renewals atomic.Int32
	// acquires counts the attempts to take the lock; inLease, the
	// renewals since it was last taken.
	acquires, inLease atomic.Int32
}

func (l *fakeLocker) Acquire(context.Context) (string, error) {
	l.acquires.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acquire == nil {
		l.inLease.Store(0)
	}
	return "gpushare/leader", l.acquire
}

func (l *fakeLocker) Renew(ctx context.Context) error {
	l.renewals.Add(1)
	l.inLease.Add(1)
	l.mu.Lock()
	renew := l.renew
	l.mu.Unlock()
	if renew == nil {
		return nil
	}
	return renew(ctx)
}

func (l *fakeLocker) Release(context.Context) error { return nil }

func (l *fakeLocker) set(f func(*fakeLocker)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l)
}

// leaderService campaigns with the fake lock (ttl 600ms) on a DGX-1 with
// one gated job; it returns a stop function that waits for the campaign.
func leaderService(t *testing.T, l *fakeLocker) (*Service, *fakeNomad, func()) {
	t.Helper()
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("first", 25))
	cfg := config.Default()
	cfg.Leader.TTL = "600ms"
	s, err := newService(cfg, hclog.NewNullLogger(), f, time.Now)
	must.NoError(t, err)
	s.newLocker = func() (locker, error) { return l, nil }
	must.NoError(t, s.watcher.resync(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.campaign(ctx)
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return s, f, stop
}

// waitFor waits until cond holds; its bound (minutes) is liveness only:
// no test decides on how long the wait took.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The leader keeps its lease while renewals succeed, over several TTLs:
// one lease (the lock taken once) is renewed 8 times, every TTL/3, so it
// lasts 2.3 TTLs and more, which a lease not extended by its renewals
// never does. (A machine stalled past a lease's end loses that lease,
// as it should; the wait goes on with the next one.)
func TestLeaseRenewed(t *testing.T) {
	l := &fakeLocker{}
	s, _, _ := leaderService(t, l)
	waitFor(t, "leading", s.IsLeader)
	waitFor(t, "one lease renewed 8 times", func() bool { return l.inLease.Load() >= 8 })
	t.Logf("lock taken %d times, renewed %d times", l.acquires.Load(), l.renewals.Load())
}

// A renewal refused with a conflict (another replica holds the lock) stops
// the decision loop at once; the replica sends no pin afterwards, even
// from a pass that was still running, and shows none of the queue's
// gauges of its last pass.
func TestLostLockStopsLeading(t *testing.T) {
	l := &fakeLocker{}
	s, f, stop := leaderService(t, l)
	waitFor(t, "leading", s.IsLeader)
	f.put(gated("huge", 900)) // more than the node's 8 GPUs: refused for good
	must.NoError(t, s.watcher.resync(t.Context()))
	waitFor(t, "a pass that refuses huge", func() bool { return counterValue(t, s, "gpushare_refused_groups") == 1 })
	l.set(func(l *fakeLocker) {
		l.renew = func(context.Context) error { return fmt.Errorf("renew conflict %w", api.ErrLockConflict) }
		l.acquire = fmt.Errorf("acquire conflict %w", api.ErrLockConflict)
	})
	waitFor(t, "leadership to end", func() bool { return !s.IsLeader() && !s.lease.leading.Load() })
	stop()
	// the queue's gauges are the leader's: none on a replica that no longer leads
	must.EqOp(t, 0.0, counterValue(t, s, "gpushare_refused_groups"))
	registers := f.registers
	f.put(gated("second", 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context()) // a pass of the old loop that was still running
	must.Eq(t, registers, f.registers)
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["second"]))
	must.StrContains(t, s.loop.answers.pending[key("second")], ErrNotLeader.Error())
}

// A renewal that hangs (Nomad unreachable) does not keep the replica
// leading past its lease: the renewal is abandoned when the lease ends
// (its request's deadline is the lease's end) and the decision loop
// stops.
func TestHungRenewalEndsTheLease(t *testing.T) {
	l := &fakeLocker{}
	s, _, _ := leaderService(t, l)
	waitFor(t, "leading", s.IsLeader)
	type hung struct {
		deadline, leaseEnd time.Time
		hasDeadline        bool
		err                error
	}
	ended := make(chan hung, 1)
	l.set(func(l *fakeLocker) {
		l.renew = func(ctx context.Context) error {
			h := hung{leaseEnd: time.Unix(0, s.lease.end.Load())}
			h.deadline, h.hasDeadline = ctx.Deadline()
			<-ctx.Done()
			h.err = ctx.Err()
			select {
			case ended <- h:
			default:
			}
			return ctx.Err()
		}
		l.acquire = fmt.Errorf("acquire conflict %w", api.ErrLockConflict)
	})
	waitFor(t, "leadership to end", func() bool { return !s.lease.leading.Load() })
	must.False(t, s.IsLeader())
	var h hung
	waitFor(t, "the hung renewal to be abandoned", func() bool {
		select {
		case h = <-ended:
			return true
		default:
			return false
		}
	})
	must.True(t, h.hasDeadline, must.Sprint("a renewal is bounded"))
	must.Eq(t, h.leaseEnd.UnixNano(), h.deadline.UnixNano(), must.Sprint("a renewal is abandoned when the lease it would extend ends"))
	must.ErrorIs(t, h.err, context.DeadlineExceeded)
}

// A replica that cannot take the lock never leads.
func TestNoLockNoLeading(t *testing.T) {
	l := &fakeLocker{acquire: fmt.Errorf("acquire conflict %w", api.ErrLockConflict)}
	s, f, stop := leaderService(t, l)
	waitFor(t, "three refused attempts at the lock", func() bool { return l.acquires.Load() >= 3 })
	must.False(t, s.lease.leading.Load())
	must.False(t, s.IsLeader())
	stop()
	must.Eq(t, 0, f.registers)
}
