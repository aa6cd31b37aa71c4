package service

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// A pin sent is unconfirmed until Nomad makes its allocations: then it
// is counted confirmed and forgotten. One with no allocation is kept 5
// minutes, then forgotten uncounted, and one whose job is gone at once.
func TestUnconfirmedPinsAreConfirmedOnceAllocated(t *testing.T) {
	f, s, _ := pinnedX(t)
	must.MapContainsKey(t, s.loop.unconfirmed.sent, key("x"))
	sent := s.loop.unconfirmed.sent[key("x")]
	confirm := func(after time.Duration) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.loop.unconfirmed.confirm(s.state, func() time.Time { return sent.Add(after) }, hclog.NewNullLogger(), s.loop.metrics)
	}
	s.loop.unconfirmed.pinned(key("ghost"), sent)
	confirm(time.Minute)
	must.MapNotContainsKey(t, s.loop.unconfirmed.sent, key("ghost"), must.Sprint("no such job"))
	must.MapContainsKey(t, s.loop.unconfirmed.sent, key("x"), must.Sprint("no allocation yet"))
	confirm(5*time.Minute + time.Second)
	must.MapNotContainsKey(t, s.loop.unconfirmed.sent, key("x"), must.Sprint("no allocation after 5 minutes"))
	must.Eq(t, 0.0, counterValue(t, s, "gpushare_confirmations_total"))

	s.loop.unconfirmed.pinned(key("x"), sent)
	f.placeNew(t, "x", 25)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.MapNotContainsKey(t, s.loop.unconfirmed.sent, key("x"))
	must.Eq(t, 1.0, counterValue(t, s, "gpushare_confirmations_total"))
}
