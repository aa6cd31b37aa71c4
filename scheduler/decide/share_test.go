package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// With idle_gpu_first and no idle GPU, a group shares a GPU only when
// sharing beats waiting for a GPU of its own (SJF-BSBF's rule): two jobs at
// a predicted 0.485 each. Waiting a minute for a GPU beats sharing; when
// every GPU is busy for 10 h, sharing wins; with no run time declared, or
// a partner that declares none, there is nothing to weigh and the
// placement stands.
func TestSharingMustBeatWaiting(t *testing.T) {
	hog, ok := interference.Default().Lookup("ResNet-50 (batch size 16)")
	must.True(t, ok)
	build := func(soon time.Duration, declared bool) (*placement.Snapshot, map[string]time.Time) {
		s := snapshot(t, "dgx1-v100.hcl")
		n, _ := s.Node("n1")
		ends := map[string]time.Time{}
		for g := range n.GPUs {
			var shares []string
			for k := range 50 {
				shares = append(shares, devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: k}.String())
			}
			id := "hog-" + string(rune('0'+g))
			must.NoError(t, s.AddAlloc(placement.Alloc{ID: id, Node: "n1", Shares: shares, Profile: hog}))
			if declared {
				ends[id] = now.Add(10 * time.Hour)
			}
		}
		if declared {
			ends["hog-3"] = now.Add(soon)
		}
		return s, ends
	}
	g := group("new", 1, 50, 0, time.Hour)
	g.Req.Profile = hog
	c := Config{DefaultExpected: time.Hour, IdleFirst: true}

	s, ends := build(time.Minute, true)
	as := Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)
	must.Eq(t, []string{"wait new"}, kinds(as))
	must.StrContains(t, as[0].Reason, "than waiting about")

	s, ends = build(10*time.Hour, true)
	must.Eq(t, []string{"pin new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))

	s, ends = build(time.Minute, false)
	must.Eq(t, []string{"pin new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))
	s, ends = build(time.Minute, true)
	undeclared := g
	undeclared.Req.Expected = 0
	must.Eq(t, []string{"pin new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{undeclared}, Ends: ends, Now: now}, c)))
	// Without idle_gpu_first (inference clusters) fractions pack: no rule.
	c.IdleFirst = false
	must.Eq(t, []string{"pin new"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))
}

// halfBusy runs a job of profile p on half of each GPU of node n1 but
// the last, ending in 10 h, and a whole-GPU job on the last, ending in
// soon: a group that waits gets that GPU then.
func halfBusy(t *testing.T, p interference.Profile, soon time.Duration) (*placement.Snapshot, map[string]time.Time) {
	t.Helper()
	s := snapshot(t, "dgx1-v100.hcl")
	n, _ := s.Node("n1")
	ends := map[string]time.Time{}
	last := len(n.GPUs) - 1
	for g := range n.GPUs {
		k := 50
		if g == last {
			k = 100
		}
		var shares []string
		for i := range k {
			shares = append(shares, devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: i}.String())
		}
		id := "half-" + string(rune('0'+g))
		must.NoError(t, s.AddAlloc(placement.Alloc{ID: id, Node: "n1", Shares: shares, Profile: p}))
		ends[id] = now.Add(10 * time.Hour)
		if g == last {
			ends[id] = now.Add(soon)
		}
	}
	return s, ends
}

// A pairing the prediction may be wrong about costs no more than the time
// until introspection sees it (Config.ObserveWithin): weighed on the
// expected gain against that bounded cost, a pair that wins at the
// predictions (0.83x each) is formed even though, one uncertainty (0.4)
// below them, the job would end later than waiting 1.2 h for a GPU of its
// own; without introspection it waits. A pair that loses at the
// predictions is never formed.
func TestABadPairingCostsWhatIntrospectionLetsIt(t *testing.T) {
	m := &interference.Model{Profiles: map[string]interference.Profile{"a": {Name: "a", SM: 0.6}}}
	a, _ := m.Lookup("a")
	pol, err := placement.New(placement.PolicyGpushare, placement.Options{Model: m, Predictor: interference.NewKnowledge(m, 0.4)})
	must.NoError(t, err)
	g := group("new", 1, 50, 0, time.Hour)
	g.Req.Profile = a
	c := Config{DefaultExpected: time.Hour, IdleFirst: true}

	s, ends := halfBusy(t, a, 72*time.Minute)
	as := Step(pol, Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)
	must.Eq(t, []string{"wait new"}, kinds(as))
	must.StrContains(t, as[0].Reason, "at worst")

	c.ObserveWithin = 10 * time.Minute
	as = Step(pol, Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)
	must.Eq(t, []string{"pin new"}, kinds(as))
	must.Eq(t, 0.4, as[0].Decision.Placements[0].PredictedErr)

	// a GPU that frees in 20 minutes: sharing loses at the predictions
	s, ends = halfBusy(t, a, 20*time.Minute)
	must.Eq(t, []string{"wait new"}, kinds(Step(pol, Input{Snapshot: s, Groups: []Group{g}, Ends: ends, Now: now}, c)))
}

// Config.MaxStretch: a GPU whose allocation sharing has already cost more
// than the bound's share of its run time alone (Input.Stretched) is not
// shared again; the group takes another, or waits, and says so.
func TestAJobSharingHasCostEnoughIsNotSharedAgain(t *testing.T) {
	s := halvesOnTwoNodes(t)
	stretched := map[string]float64{}
	for _, a := range s.Allocs() {
		stretched[a.ID] = 0.5
	}
	gs := []Group{group("x", 1, 50, 0, time.Hour)}
	in := Input{Snapshot: s, Groups: gs, Now: now, Stretched: stretched}
	c := cfg()
	must.Eq(t, []string{"pin x"}, kinds(Step(policy(t), in, c)), must.Sprint("no bound: stretched jobs share"))
	c.MaxStretch = 0.4
	as := Step(policy(t), in, c)
	must.Eq(t, []string{"wait x"}, kinds(as))
	// the reason names the bound, not only "nodes the request avoids"
	must.StrContains(t, as[0].Reason, "on 2 node(s) a GPU has room, but sharing has already cost the job there more than max_stretch (40%) of its run time alone")
	for _, ok := range []string{"n1", "n2"} {
		n, _ := s.Node(ok)
		for i := range n.GPUs {
			stretched[ok+"-half"+string(rune('0'+i))] = 0.3
		}
		as := Step(policy(t), in, c)
		must.Eq(t, []string{"pin x"}, kinds(as))
		must.Eq(t, ok, as[0].Decision.Placements[0].Node)
		for i := range n.GPUs {
			stretched[ok+"-half"+string(rune('0'+i))] = 0.5
		}
	}
}
