package service

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// stagedWaiting is twoOnOneNode's group "two" (two one-GPU allocations
// on the one DGX-1) after a pass that registered its hold, which Nomad
// has not placed: the hold, and the placement it was registered for.
func stagedWaiting(t *testing.T) (*fakeNomad, *Service, *fakeClock, *api.Job, *pin.Record) {
	t.Helper()
	f := twoOnOneNode(t)
	f.holdUnplaced = true
	s, clock := clockedService(t, f)
	s.loop.reconcile(t.Context())
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	must.StrContains(t, s.loop.answers.pending[key("two")], "waiting for Nomad to place the holds")
	rec := &pin.Record{}
	must.NoError(t, json.Unmarshal([]byte(holds[0].Meta[metaHoldPlacement]), rec))
	must.MapLen(t, 2, byGPU(rec.Shares))
	must.SliceContainsSubset(t, rec.Shares, heldShares(holds[0]))
	return f, s, clock, holds[0], rec
}

// ahead registers job "b", six whole GPUs in one allocation, submitted
// before "two" (its namespace was watched late, say): ahead of it in the
// queue. Six of the node's eight GPUs are free beside two's.
func ahead(f *fakeNomad, clock *fakeClock) {
	b := gated("b", 600)
	b.SubmitTime = new(clock.now().Add(-time.Hour).UnixNano())
	f.put(b)
}

// disjoint fails when b holds or is pinned to one of shares.
func disjoint(t *testing.T, f *fakeNomad, shares []string) {
	t.Helper()
	if rec, ok := pin.ParseRecord(f.jobs["b"], "g"); ok {
		for _, sh := range rec.Shares {
			must.SliceNotContains(t, shares, sh, must.Sprint("b pinned onto a share staged for two"))
		}
	}
}

// pinnedAsStaged checks that two is pinned with the placement its hold
// was registered for, and the hold registered once, never let go.
func pinnedAsStaged(t *testing.T, f *fakeNomad, s *Service, hold *api.Job) {
	t.Helper()
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("two")]))
	must.Eq(t, hold.Meta[metaHoldPin], pinDigest(f.jobs["two"], "g"), must.Sprint("pinned as its hold was registered for"))
	must.Eq(t, hold.Meta[metaHoldPlacement], pin.Group(f.jobs["two"], "g").Meta[pin.MetaPlacement])
	must.Eq(t, 1, f.holdsRegistered, must.Sprint("each hold registered once"))
	must.SliceEmpty(t, f.holdsStopped)
	live := f.liveHolds()
	must.SliceLen(t, 1, live)
	must.Eq(t, *hold.ID, *live[0].ID)
}

// While a staged group waits for its holds, its shares (the holds' and
// its first allocation's) are held for it as a pinned group's are, and
// it keeps its decision: a group ahead of it in the queue, decided in
// the next pass, is never given them, and the staged group is pinned as
// its holds were registered for, each hold registered once — whether
// Nomad placed the holds before that pass (placed) or after (unplaced).
// Before, the staged group was decided anew each pass, on a model that
// held none of its shares (its holds are kept out of it and it had no
// pin): "b" was pinned onto them, and "two" decided elsewhere or left
// waiting, its holds let go and new ones registered.
func TestAStagedGroupKeepsItsSharesWhileItsHoldsWait(t *testing.T) {
	for _, placed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unplaced", true: "placed"}[placed], func(t *testing.T) {
			f, s, clock, hold, rec := stagedWaiting(t)
			ahead(f, clock)
			if placed {
				f.placeHolds()
			}
			clock.add(5 * time.Second)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			bRec, ok := pin.ParseRecord(f.jobs["b"], "g")
			must.True(t, ok, must.Sprint("b takes the six GPUs two's decision leaves: ", s.loop.answers.pending[key("b")]))
			must.MapLen(t, 6, byGPU(bRec.Shares))
			disjoint(t, f, rec.Shares)
			if !placed {
				_, ok := pin.ParseRecord(f.jobs["two"], "g")
				must.False(t, ok)
				must.StrContains(t, s.loop.answers.pending[key("two")], "waiting for Nomad to place the holds")
				must.Eq(t, 1, f.holdsRegistered)
				f.placeHolds()
				clock.add(5 * time.Second)
				must.NoError(t, s.watcher.resync(t.Context()))
				s.loop.reconcile(t.Context())
			}
			pinnedAsStaged(t, f, s, hold)
			disjoint(t, f, rec.Shares)
		})
	}
}

// A scheduler that starts while a group waits for its holds (the last
// one stopped or lost its lease) reads the decision back from the holds
// Nomad lists, signed: it holds the group's shares and pins it as
// decided once Nomad placed them, without registering a hold again. It
// used to let the holds go and decide the group again.
func TestARestartedSchedulerKeepsAStagedDecision(t *testing.T) {
	f, _, clock, hold, rec := stagedWaiting(t)
	ahead(f, clock)
	next, nextClock := clockedService(t, f)
	nextClock.add(5 * time.Second)
	next.loop.reconcile(t.Context())
	disjoint(t, f, rec.Shares)
	_, ok := pin.ParseRecord(f.jobs["b"], "g")
	must.True(t, ok, must.Sprint(next.loop.answers.pending[key("b")]))
	must.SliceEmpty(t, f.holdsStopped, must.Sprint("the hold is kept"))
	must.Eq(t, 1, f.holdsRegistered)

	f.placeHolds()
	nextClock.add(5 * time.Second)
	must.NoError(t, next.watcher.resync(t.Context()))
	next.loop.reconcile(t.Context())
	pinnedAsStaged(t, f, next, hold)
}

// A staged decision that no longer stands is let go: a GPU it was
// staged on turned unhealthy while its holds waited. The holds are
// stopped and the group is decided again, off that GPU, in the same
// pass.
func TestAStagedDecisionOnAnUnhealthyGPUIsDecidedAgain(t *testing.T) {
	f, s, clock, hold, rec := stagedWaiting(t)
	lost := heldShares(hold)[0]
	f.mu.Lock()
	f.index++
	f.nodes[0].ModifyIndex = f.index
	f.nodes[0].NodeResources.Devices[0].Instances = []*api.NodeDevice{{ID: lost, Healthy: false}}
	f.mu.Unlock()
	clock.add(5 * time.Second)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{*hold.ID}, f.holdsStopped, must.Sprint("the hold of the decision let go"))
	must.Eq(t, 2, f.holdsRegistered, must.Sprint("the new decision's hold"))
	live := f.liveHolds()
	must.SliceLen(t, 1, live)
	next := &pin.Record{}
	must.NoError(t, json.Unmarshal([]byte(live[0].Meta[metaHoldPlacement]), next))
	gpu := lost[:strings.LastIndexByte(lost, ':')]
	must.MapNotContainsKey(t, byGPU(next.Shares), gpu)
	must.False(t, slices.Equal(rec.Shares, next.Shares))
}
