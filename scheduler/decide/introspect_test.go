package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// pair puts two half-GPU production allocations a and b on GPU 0 of n1.
func pair(t *testing.T, s *placement.Snapshot, a, b placement.Class) {
	t.Helper()
	n, _ := s.Node("n1")
	for i, c := range []placement.Class{a, b} {
		var shares []string
		for k := range 50 {
			shares = append(shares, devicefn.ShareID{UUID: n.GPUs[0].UUID, Index: 50*i + k}.String())
		}
		id := []string{"a", "b"}[i]
		must.NoError(t, s.AddAlloc(placement.Alloc{ID: id, Node: "n1", Shares: shares, Class: c,
			Profile: interference.Profile{Name: "job-" + id, SM: 0.5, MemBW: 0.5}}))
	}
}

func running(normA, normB float64) map[string]Running {
	return map[string]Running{
		"a": {Group: Key{Namespace: "default", Job: "a", Group: "g"}, Started: now.Add(-2 * time.Hour), Norm: normA},
		"b": {Group: Key{Namespace: "default", Job: "b", Group: "g"}, Started: now.Add(-time.Hour), Norm: normB},
	}
}

// A production job seen below its bound makes the step move the newer job
// of the pair; its share is free for the queue in the same step; the pair
// is named for the executor to remember; the snapshot is left as found.
func TestUnpairMovesTheNewer(t *testing.T) {
	s := snapshot(t, "dgx1-v100.hcl")
	pair(t, s, placement.ClassProduction, placement.ClassProduction)
	before := s.Allocs()
	c := cfg()
	c.MaxSlowdown = 0.3
	g := group("next", 1, 50, time.Minute, time.Hour)
	in := Input{Snapshot: s, Now: now, Running: running(0.6, 0.9), Groups: []Group{g}}
	as := Step(policy(t), in, c)
	must.Eq(t, []string{"unpair b", "pin next"}, kinds(as))
	must.Eq(t, []string{"b"}, as[0].Allocs)
	must.Eq(t, "job-a", as[0].Pair.Slow.Name)
	must.Eq(t, "job-b", as[0].Pair.With.Name)
	must.StrContains(t, as[0].Reason, "0.60x of alone")
	must.Eq(t, before, s.Allocs())

	// Within the bound, or within the observation's error of it: nothing.
	in.Running = running(0.75, 0.9)
	must.Eq(t, []string{"pin next"}, kinds(Step(policy(t), in, c)))
	r := running(0.6, 0.9)
	a := r["a"]
	a.Err = 0.15
	r["a"] = a
	in.Running = r
	must.Eq(t, []string{"pin next"}, kinds(Step(policy(t), in, c)))
}

// A job is judged by its own bound when it has one, else the configured
// one, else the snapshot's default (10%).
func TestUnpairJudgesByTheJobsBound(t *testing.T) {
	s := snapshot(t, "dgx1-v100.hcl")
	pair(t, s, placement.ClassProduction, placement.ClassProduction)
	a, err := s.Remove("a")
	must.NoError(t, err)
	a.MaxSlowdown = 0.5
	must.NoError(t, s.AddAlloc(a))
	c := cfg()
	c.MaxSlowdown = 0.3
	in := Input{Snapshot: s, Now: now, Running: running(0.6, 0.9)}
	must.Eq(t, 0, len(Step(policy(t), in, c))) // a at 0.6x is within its own 0.5
	in.Running = running(0.9, 0.75)            // b at 0.75x: within 0.3
	must.Eq(t, 0, len(Step(policy(t), in, c)))
	must.Eq(t, []string{"unpair b"}, kinds(Step(policy(t), in, cfg()))) // beyond the default 0.1
}

// An opportunistic job moves before a production one, even an older one;
// a job alone is never unpaired.
func TestUnpairMovesOpportunisticFirst(t *testing.T) {
	s := snapshot(t, "dgx1-v100.hcl")
	pair(t, s, placement.ClassOpportunistic, placement.ClassProduction)
	c := cfg()
	c.MaxSlowdown = 0.3
	as := Step(policy(t), Input{Snapshot: s, Now: now, Running: running(0.9, 0.5)}, c)
	must.Eq(t, []string{"unpair a"}, kinds(as))
	must.Eq(t, "job-b", as[0].Pair.Slow.Name)

	alone := snapshot(t, "dgx1-v100.hcl")
	pair(t, alone, placement.ClassProduction, placement.ClassProduction)
	_, err := alone.Remove("b")
	must.NoError(t, err)
	must.Eq(t, 0, len(Step(policy(t), Input{Snapshot: alone, Now: now, Running: running(0.5, 0)}, c)))
}

// An allocation the executor does not list (of a namespace it does not
// manage) is a neighbour: never moved, however low its class or late its
// start; the slow job moves itself, and the reason says why.
func TestUnpairNeverMovesAnUnlistedNeighbour(t *testing.T) {
	s := snapshot(t, "dgx1-v100.hcl")
	pair(t, s, placement.ClassProduction, placement.ClassOpportunistic)
	c := cfg()
	c.MaxSlowdown = 0.3
	r := running(0.5, 0)
	delete(r, "b")
	as := Step(policy(t), Input{Snapshot: s, Now: now, Running: r}, c)
	must.Eq(t, []string{"unpair a"}, kinds(as))
	must.StrContains(t, as[0].Reason, "the only one of them this scheduler may move")
}

// A pair within its bound is unpaired when observation says it loses:
// a (2 h left) and b (5 h left, started later) both at 0.45x of alone,
// within the bound of 0.6, get less done together than one alone, and
// take longer shared, summed over both, than b waiting for a to end, even
// counting the hour of work b loses by moving. At 0.75x they gain; at
// 0.5x and 0.55x they still lose by the sum, but get more done than one
// alone, so b is not sent to wait in the queue; without declared run
// times there is nothing to weigh.
func TestUnpairWhenObservedLosing(t *testing.T) {
	s := snapshot(t, "dgx1-v100.hcl")
	pair(t, s, placement.ClassProduction, placement.ClassProduction)
	c := cfg()
	c.MaxSlowdown = 0.6
	ends := map[string]time.Time{"a": now.Add(2 * time.Hour), "b": now.Add(5 * time.Hour)}
	in := Input{Snapshot: s, Now: now, Running: running(0.45, 0.45), Ends: ends}
	as := Step(policy(t), in, c)
	must.Eq(t, []string{"unpair b"}, kinds(as))
	must.StrContains(t, as[0].Reason, "than one after the other")
	must.Eq(t, "job-b", as[0].Pair.Slow.Name) // as slow as a: the one that moves
	must.Eq(t, "job-a", as[0].Pair.With.Name)

	in.Running = running(0.75, 0.75)
	must.Eq(t, 0, len(Step(policy(t), in, c)))
	in.Running = running(0.5, 0.55)
	must.Eq(t, 0, len(Step(policy(t), in, c)))
	in.Running, in.Ends = running(0.45, 0.45), nil
	must.Eq(t, 0, len(Step(policy(t), in, c)))
}
