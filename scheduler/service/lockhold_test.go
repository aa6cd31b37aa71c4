package service

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The lock keeps its longest single hold until asked, then starts over;
// holds are measured from Lock and TryLock alike, and a wait on a
// condition is not a hold.
func TestTimedMutexKeepsTheLongestHold(t *testing.T) {
	var m timedMutex
	m.Lock()
	time.Sleep(30 * time.Millisecond)
	m.Unlock()
	m.Lock()
	m.Unlock() // a short one after does not lower it
	must.GreaterEq(t, 30*time.Millisecond, m.longest())
	must.Eq(t, 0, m.longest())
	must.True(t, m.TryLock())
	time.Sleep(20 * time.Millisecond)
	m.Unlock()
	must.GreaterEq(t, 20*time.Millisecond, m.longest())
}

// A pass reports the longest anyone held the model's lock since the pass
// before, here a reader of the API holding it 50 ms while the pass waits
// (gpushare_lock_hold_longest_seconds).
func TestAPassReportsTheLongestLockHold(t *testing.T) {
	s := newTestService(t, &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}})
	s.loop.reconcile(context.Background())
	s.mu.Lock()
	time.Sleep(50 * time.Millisecond)
	s.mu.Unlock()
	s.loop.reconcile(context.Background())
	must.GreaterEq(t, 50*time.Millisecond, s.loop.timing.longestHold)
	must.Eq(t, 0, s.mu.longest()) // the pass took it: the next starts over
}
