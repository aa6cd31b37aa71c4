package service

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/nomad/api"
)

// Leadership. Only a replica whose lease is current sends pins, and losing
// the lease stops the leader's work before any other replica can hold the
// lock. Nomad's api.LockLeaser does not give that: when a renewal fails
// with a conflict it returns from its lease loop but leaves the protected
// function running and acquires again, so two decision loops could pin at
// once. The service holds the lease itself:
//
//   - a lease lasts from just before the request that acquired or renewed
//     the lock until TTL minus a margin later, so it ends before Nomad's
//     server, which counts from when it handled the request, frees the lock
//     (and Nomad then waits lock_delay more before another replica may
//     take it);
//   - it is renewed every TTL/3; a renewal that has not answered when the
//     lease ends is abandoned, and a conflict, or a lease that ran out,
//     cancels the decision loop's context and waits for the loop to return
//     before campaigning again;
//   - every pin and preemption checks the lease just before its request.

// locker is the part of Nomad's lock API the lease uses (api.Locks).
type locker interface {
	Acquire(ctx context.Context) (string, error)
	Renew(ctx context.Context) error
	Release(ctx context.Context) error
}

// ErrNotLeader is returned for a pin attempted without a current lease.
var ErrNotLeader = errors.New("this replica's leader lease is not current")

// leaseMargin is how long before Nomad could free the lock the lease ends.
func leaseMargin(ttl time.Duration) time.Duration { return max(ttl/10, 100*time.Millisecond) }

// lease is this replica's leadership, as the loop and the records ask
// about it (leadership, writeLease).
type lease struct {
	// leading is set while the decision loop runs.
	leading atomic.Bool
	// end is when the lease runs out (Unix ns; 0: no lease).
	end atomic.Int64
	// need is set once the service campaigns: from then on a pin needs a
	// current lease.
	need atomic.Bool
}

var (
	_ leadership = (*lease)(nil)
	_ writeLease = (*lease)(nil)
)

// mayWrite returns ErrNotLeader unless this replica may change jobs now:
// its lease is current (or it does not campaign: tests of one pass).
func (l *lease) mayWrite() error {
	if l.need.Load() && !l.current() {
		return ErrNotLeader
	}
	return nil
}

// current reports whether the lease lets this replica pin now.
func (l *lease) current() bool {
	end := l.end.Load()
	return end != 0 && time.Now().UnixNano() < end
}

// isLeader reports whether this replica leads and its lease is current.
func (l *lease) isLeader() bool { return l.leading.Load() && l.current() }

// follows reports whether this replica campaigns and does not lead.
func (l *lease) follows() bool { return l.need.Load() && !l.isLeader() }

// apiLocker makes Nomad's lock on the configured variable.
func (s *Service) apiLocker() (locker, error) {
	v := api.Variable{Path: s.cfg.Leader.VariablePath, Lock: &api.VariableLock{TTL: s.cfg.Leader.TTL, LockDelay: s.cfg.Leader.LockDelay}}
	l, err := s.nomad.Client().Locks(api.WriteOptions{}, v, api.LocksOptionWithMaxRetries(0))
	if err != nil {
		return nil, fmt.Errorf("leader lock %s: %w", s.cfg.Leader.VariablePath, err)
	}
	return l, nil
}

// campaign competes for the leader lock and leads while its lease is
// current, until ctx ends.
func (s *Service) campaign(ctx context.Context) {
	newLocker := s.newLocker
	if newLocker == nil {
		newLocker = s.apiLocker
	}
	ttl := config.Duration(s.cfg.Leader.TTL)
	s.lease.need.Store(true)
	var loaded time.Time
	for ctx.Err() == nil {
		l, err := newLocker()
		if err != nil {
			s.log.Error("cannot create the leader lock", "error", err)
			sleep(ctx, 2*time.Second)
			continue
		}
		if s.holdLease(ctx, l, ttl) {
			continue
		}
		// another replica leads: show its records (reasons, learned
		// profiles, placements it wrote)
		if time.Since(loaded) >= reasonsEvery {
			loaded = time.Now()
			err := s.records.loadSecret(ctx, false)
			if err == nil {
				err = s.records.loadState(ctx, true)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("cannot read the leader's records from Nomad Variables", "error", err)
			}
		}
		sleep(ctx, max(ttl/5, 200*time.Millisecond))
	}
}

// holdLease acquires the lock and leads while the lease is renewed. It
// returns once the decision loop has stopped: false when the lock was
// not acquired.
func (s *Service) holdLease(ctx context.Context, l locker, ttl time.Duration) bool {
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, ttl-leaseMargin(ttl))
	_, err := l.Acquire(actx)
	cancel()
	if err != nil {
		if !errors.Is(err, api.ErrLockConflict) && ctx.Err() == nil {
			s.log.Warn("cannot take the leader lock", "error", err)
		}
		return false
	}
	end := start.Add(ttl - leaseMargin(ttl))
	s.lease.end.Store(end.UnixNano())
	leadCtx, stop := context.WithCancel(ctx)
	expiry := time.AfterFunc(time.Until(end), stop) // the lease ends the loop, renewed or not
	defer expiry.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.lead(leadCtx)
	}()
	defer func() {
		s.lease.end.Store(0)
		stop()
		<-done // the decision loop has returned: nothing of it is in flight
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := l.Release(rctx); err != nil && !errors.Is(err, api.ErrLockConflict) {
			s.log.Debug("cannot release the leader lock; it expires after its ttl", "error", err)
		}
	}()
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-leadCtx.Done():
			s.log.Warn("leader lease ran out before it could be renewed; stopped leading", "ttl", ttl)
			return true
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(ctx, end)
		err := l.Renew(rctx)
		cancel()
		switch {
		case err == nil:
			if !expiry.Stop() {
				s.log.Warn("leader lease ran out while it was renewed; stopped leading", "ttl", ttl)
				return true
			}
			end = start.Add(ttl - leaseMargin(ttl))
			s.lease.end.Store(end.UnixNano())
			expiry.Reset(time.Until(end))
		case errors.Is(err, api.ErrLockConflict):
			s.log.Warn("lost the leader lock to another replica; stopped leading", "error", err)
			return true
		default:
			s.log.Warn("cannot renew the leader lease; retrying until it runs out", "error", err, "lease_left", time.Until(end).Round(time.Millisecond))
		}
	}
}
