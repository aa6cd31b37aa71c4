package service

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A follower that started before the leader made the signing key trusts
// the placements the leader signs once it reads the key: the pinned group
// without an allocation holds its shares (after a failover, the new
// leader gives them to no other group).
func TestKeyLoadedLaterTrustsSignedPlacements(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	follower, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, follower.resync(t.Context()))
	must.NoError(t, follower.loadSecret(t.Context(), false)) // no key yet
	must.NoError(t, follower.loadState(t.Context(), true))

	leader := loadedService(t, f) // makes the key
	leader.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["x"]))
	must.NoError(t, follower.resync(t.Context()))
	_, trusted := follower.state.Record(f.jobs["x"], "g")
	must.False(t, trusted) // no key to verify it with
	must.MapEmpty(t, follower.state.Snapshot(nil, nil).HeldFor)

	must.NoError(t, follower.loadSecret(t.Context(), false))
	_, trusted = follower.state.Record(f.jobs["x"], "g")
	must.True(t, trusted)
	held := follower.state.Snapshot(nil, nil).HeldFor
	must.MapLen(t, 1, held)
	must.True(t, slices.Contains(slices.Collect(maps.Values(held)), key("x")))
}
