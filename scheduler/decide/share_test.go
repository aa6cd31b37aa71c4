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
