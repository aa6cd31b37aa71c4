package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// busyHalves puts a 50-share allocation of profile p on each GPU of n1,
// time-sliced or not, all ending in 10 h but the last, which ends soon.
func busyHalves(t *testing.T, p interference.Profile, timeslice bool, soon time.Duration) (*placement.Snapshot, map[string]time.Time) {
	t.Helper()
	s := snapshot(t, "dgx1-v100.hcl")
	n, _ := s.Node("n1")
	ends := map[string]time.Time{}
	for g := range n.GPUs {
		var shares []string
		for k := range 50 {
			shares = append(shares, devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: k}.String())
		}
		id := "hog-" + string(rune('0'+g))
		must.NoError(t, s.AddAlloc(placement.Alloc{ID: id, Node: "n1", Shares: shares, Profile: p, Timeslice: timeslice}))
		ends[id] = now.Add(10 * time.Hour)
	}
	ends["hog-7"] = now.Add(soon)
	return s, ends
}

// With idle_gpu_first and no idle GPU, a capped group that would slow a
// job beside it waits for a GPU freeing in a minute (SJF-BSBF's rule);
// the same group time-sliced joins a GPU of time-sliced jobs at once:
// they take turns rather than run beside each other, and opted in to
// share rather than wait.
func TestTimeslicedStacksRatherThanWait(t *testing.T) {
	hog, ok := interference.Default().Lookup("ResNet-50 (batch size 16)")
	must.True(t, ok)
	c := Config{DefaultExpected: time.Hour, IdleFirst: true}
	g := group("new", 1, 50, 0, time.Hour)
	g.Req.Profile = hog

	s, ends := busyHalves(t, hog, false, time.Minute)
	must.Eq(t, []string{"wait new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))

	g.Req.Timeslice = true
	s, ends = busyHalves(t, hog, true, time.Minute)
	as := Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)
	must.Eq(t, []string{"pin new"}, kinds(as))
	must.StrContains(t, as[0].Decision.Placements[0].Reason, "time-sliced, takes turns")
	// beside capped jobs it may not go: it waits
	s, ends = busyHalves(t, hog, false, time.Minute)
	must.Eq(t, []string{"wait new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))
}

// Time-sliced jobs run at about 1/n of alone by their turns: that is no
// pairing's fault, and introspection never unpairs them.
func TestIntrospectionLeavesTimeslicedAlone(t *testing.T) {
	for _, timeslice := range []bool{false, true} {
		s := snapshot(t, "dgx1-v100.hcl")
		pair(t, s, placement.ClassProduction, placement.ClassProduction)
		for _, id := range []string{"a", "b"} {
			a, err := s.Remove(id)
			must.NoError(t, err)
			a.Timeslice = timeslice
			must.NoError(t, s.AddAlloc(a))
		}
		c := cfg()
		c.MaxSlowdown = 0.3
		as := Step(policy(t), Input{Snapshot: s, Now: now, Running: running(0.45, 0.45)}, c)
		if timeslice {
			must.Eq(t, 0, len(as))
		} else {
			must.Eq(t, []string{"unpair b"}, kinds(as))
		}
	}
}

// MaxStretch binds what pairing costs a job, not what its turns cost a
// time-sliced one: a time-sliced group joins a GPU whose time-sliced job
// has run at half speed for most of its life (stretched 0.9), while a
// capped group is steered off the same GPU when its job is not
// time-sliced.
func TestStretchLeavesTimeslicedAlone(t *testing.T) {
	c := Config{DefaultExpected: time.Hour, IdleFirst: true, MaxStretch: 0.4}
	for _, timeslice := range []bool{true, false} {
		s, ends := busyHalves(t, interference.Profile{}, timeslice, 10*time.Hour)
		stretched := map[string]float64{}
		for _, a := range s.Allocs() {
			stretched[a.ID] = 0.9
		}
		g := group("new", 1, 50, 0, time.Hour)
		g.Req.Timeslice = timeslice
		as := Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now, Stretched: stretched}, c)
		if timeslice {
			must.Eq(t, []string{"pin new"}, kinds(as))
			continue
		}
		must.Eq(t, []string{"wait new"}, kinds(as))
		must.StrContains(t, as[0].Reason, "max_stretch (40%)")
	}
}
