package service

import (
	"strconv"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// What sharing has cost each allocation whose group declares a run time
// (what max_stretch and expected ends read) is saved at most every chargesEvery, in whole
// seconds rounded down, and a new leader starts from it instead of from
// zero.
func TestANewLeaderStartsFromTheChargesSaved(t *testing.T) {
	sc := newPairSceneWith(t, map[string]string{pin.MetaExpected: "10m"})
	sc.s.records.stateLoaded = true // records are saved
	charge := func(after time.Duration) {
		sc.sample(t, 25, 25, 25)
		sc.s.loop.reconcile(t.Context())
		*sc.clock = sc.clock.Add(after)
	}
	charge(time.Minute)
	charge(0) // 34.5 s (TestWhatSharingCostsIsCharged), saved by the pass
	must.Eq(t, 34500*time.Millisecond, sc.s.loop.intro.lostToSharing()["alloc-old"])
	saved := sc.f.vars[chargesKind.path(0)]
	must.Eq(t, map[string]string{"alloc-old": "34", normPrefix + "alloc-old": "0.500"}, saved,
		must.Sprint("whole seconds, rounded down, and the throughput last judged; none for an allocation sharing cost nothing"))

	// charged more within the minute: not written again
	*sc.clock = sc.clock.Add(30 * time.Second)
	charge(0)
	must.Greater(t, 34500*time.Millisecond, sc.s.loop.intro.lostToSharing()["alloc-old"])
	must.Eq(t, saved, sc.f.vars[chargesKind.path(0)])
	sc.s.records.saveState(t.Context())
	must.Eq(t, "34", sc.f.vars[chargesKind.path(0)]["alloc-old"])

	// a minute on, the pass saves the charge as it stands
	*sc.clock = sc.clock.Add(time.Minute)
	charge(0)
	lost := sc.s.loop.intro.lostToSharing()["alloc-old"]
	must.Greater(t, 80*time.Second, lost)
	must.Eq(t, strconv.Itoa(int(lost/time.Second)), sc.f.vars[chargesKind.path(0)]["alloc-old"])

	// the leader is gone: the next one starts from what was saved
	next, err := newService(sc.s.cfg, hclog.NewNullLogger(), sc.f, func() time.Time { return *sc.clock })
	must.NoError(t, err)
	must.NoError(t, next.watcher.resync(t.Context()))
	must.NoError(t, next.records.loadState(t.Context(), true))
	must.Eq(t, map[string]time.Duration{"alloc-old": lost.Truncate(time.Second)}, next.loop.intro.lostToSharing())
	next.mu.Lock()
	must.Eq(t, float64(lost/time.Second)/600, next.loop.stretched()["alloc-old"])
	next.mu.Unlock()

	// and, until it has judged the pair itself (its first pass has no
	// samples), expects old to end at the throughput the old leader last
	// judged it at, half of alone, not as if it ran alone: old is past its
	// 10m, so it needs as much again as it has done, at half its speed
	next.loop.reconcile(t.Context())
	must.Eq(t, 0.5, next.loop.intro.progress()["alloc-old"].norm)
	now := *sc.clock
	endOf := func(s *Service) time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.loop.expectedEnds(s.state.Snapshot(s.loop.profile, nil).Snapshot, nil, now)["alloc-old"]
	}
	leader, follower := endOf(sc.s), endOf(next)
	must.Less(t, 2*time.Second, leader.Sub(follower).Abs(), must.Sprintf("the old leader expects %s, the new one %s", leader, follower))
}

// The charges of the groups that declare a run time are saved, whether
// max_stretch is on or not: expected ends net them from the time each ran
// (queue.Left) as well. A group that declares none has no use for its
// charge after a failover: nothing is saved for it.
func TestChargesSavedAreThoseOfDeclaredRunTimes(t *testing.T) {
	for name, tc := range map[string]struct {
		sc    *pairScene
		saved bool
	}{
		"no run time declared": {newPairScene(t), false},
		"max_stretch = 0": {newPairSceneWith(t, map[string]string{pin.MetaExpected: "10m"}, func(c *config.Config) {
			c.Introspection.MaxStretch = ptr(0.0)
		}), true},
	} {
		sc := tc.sc
		sc.s.records.stateLoaded = true
		for range 2 {
			sc.sample(t, 25, 25, 25)
			sc.s.loop.reconcile(t.Context())
			*sc.clock = sc.clock.Add(2 * time.Minute)
		}
		lost := sc.s.loop.intro.lostToSharing()["alloc-old"]
		must.Positive(t, lost, must.Sprint(name))
		if !tc.saved {
			must.MapNotContainsKey(t, sc.f.vars, chargesKind.path(0), must.Sprint(name))
			continue
		}
		must.Eq(t, map[string]string{"alloc-old": strconv.Itoa(int(lost / time.Second)), normPrefix + "alloc-old": "0.500"}, sc.f.vars[chargesKind.path(0)], must.Sprint(name))
		sc.s.mu.Lock()
		must.MapEmpty(t, sc.s.loop.stretched(), must.Sprint("the bound is off: the step reads no charge"))
		sc.s.mu.Unlock()
	}
}

// Charges read from the Variables: a value that is not a positive count
// of seconds is skipped, an allocation the replica charged more keeps its
// own, and one the leader no longer lists is dropped.
func TestChargesReadKeepTheLargerAndSkipTheBad(t *testing.T) {
	in := newPairScene(t).s.loop.intro
	in.lost["mine"] = &lostTally{lost: 90 * time.Second, at: time.Unix(5, 0)}
	in.lost["gone"] = &lostTally{lost: time.Hour}
	in.lost["behind"] = &lostTally{lost: time.Second}
	in.readCharges(map[string]string{"mine": "60", "behind": "20", "new": "7", "text": "soon", "negative": "-3", "zero": "0", "huge": "99999999999999999999",
		normPrefix + "new": "0.4", normPrefix + "behind": "fast", normPrefix + "mine": "-1", normPrefix + "gone": "0.5"})
	must.Eq(t, map[string]time.Duration{"mine": 90 * time.Second, "behind": 20 * time.Second, "new": 7 * time.Second}, in.lostToSharing())
	must.Eq(t, map[string]lostTally{"mine": {lost: 90 * time.Second}, "behind": {lost: 20 * time.Second}, "new": {lost: 7 * time.Second, norm: 0.4}}, in.progress(),
		must.Sprint("a throughput that is not a number above 0 is skipped; one without a charge is not a charge"))
	must.True(t, in.lost["mine"].at.IsZero(), must.Sprint("its clock starts again at its next judgement"))
	must.Eq(t, map[string]string{"mine": "90", "behind": "20", "new": "7", normPrefix + "new": "0.400"}, in.chargeItems(map[string]float64{"mine": 1, "behind": 1, "new": 1, "absent": 1}))
	must.Eq(t, map[string]string{"new": "7", normPrefix + "new": "0.400"}, in.chargeItems(map[string]float64{"new": 1}))
}

// A running allocation is expected to end when queue.Left says from what
// the service knows of it: the time since its tasks started, what
// sharing has cost it and its throughput when last judged; one past its
// declared run time is expected to need as much again as it has done.
func TestExpectedEndsCountWhatSharingCost(t *testing.T) {
	sc := newPairSceneWith(t, map[string]string{pin.MetaExpected: "10m"})
	begin := *sc.clock // old started an hour before, new a minute before
	sc.sample(t, 25, 25, 25)
	sc.s.loop.reconcile(t.Context())
	*sc.clock = sc.clock.Add(time.Minute)
	sc.sample(t, 25, 25, 25)
	sc.s.loop.reconcile(t.Context()) // old: 34.5 s lost, at 0.5 of alone
	now := *sc.clock

	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	ends := sc.s.loop.expectedEnds(sc.s.state.Snapshot(sc.s.loop.profile, nil).Snapshot, nil, now)
	ranNew := now.Sub(begin.Add(-time.Minute))
	must.Eq(t, now.Add(10*time.Minute-ranNew), ends["alloc-new"], must.Sprint("alone: its run time less the time it ran"))
	doneOld := now.Sub(begin.Add(-time.Hour)) - 34500*time.Millisecond
	must.Eq(t, now.Add(2*doneOld), ends["alloc-old"], must.Sprint("past its 10m: as much again as it has done, at half its speed"))
}

// A time-sliced allocation runs one turn in as many as its GPU's
// rotation holds, and has lost the time its launches waited for their
// turn, as its device plugin reported it: two opted-in jobs of 10m on one
// GPU, old started an hour ago and suspended 50m of it, new started a
// minute ago with no figures reported yet. Introspection charges neither
// (TestTurnsAreNotChargedToSharing), so without the rotation both would be
// reckoned at their speed alone.
func TestExpectedEndsCountTimeSlicedTurns(t *testing.T) {
	sc := newPairSceneWith(t, map[string]string{pin.MetaExpected: "10m", pin.MetaTimeslice: "true"})
	begin := *sc.clock
	sc.s.loop.history.SetTimeslices([]gpuhistory.AllocTimeslice{{Alloc: "alloc-old",
		Timeslice: gpuhistory.Timeslice{GPU: sc.old.GPUs[0], Quantum: 2 * time.Second, Suspended: 50 * time.Minute, Turns: 900}}})
	*sc.clock = sc.clock.Add(time.Minute)
	now := *sc.clock

	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	ends := sc.s.loop.expectedEnds(sc.s.state.Snapshot(sc.s.loop.profile, nil).Snapshot, nil, now)
	ranNew := now.Sub(begin.Add(-time.Minute)) // 2m, all of it counted as done
	must.Eq(t, now.Add(2*(10*time.Minute-ranNew)), ends["alloc-new"], must.Sprint("one turn in two: what is left takes twice as long"))
	doneOld := now.Sub(begin.Add(-time.Hour)) - 50*time.Minute // 11m: past its 10m
	must.Eq(t, now.Add(2*doneOld), ends["alloc-old"], must.Sprint("past its 10m: as much again as it has done, at one turn in two"))
}
