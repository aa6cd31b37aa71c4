package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/shoenig/test/must"
)

// Shortest first with the wait bound: groups past their bound go first, in
// submission order, then the others shortest first; a bound still ahead
// does not count, nor one that is not set.
func TestOrderShortestFirstBounded(t *testing.T) {
	gs := []Group{
		group("long-overdue", 1, 10, 3*time.Hour, 10*time.Hour),
		group("long", 1, 10, 2*time.Hour, 10*time.Hour),
		group("mid-overdue", 1, 10, time.Hour, time.Hour),
		group("short", 1, 10, time.Second, time.Minute),
		group("mid-bound-ahead", 1, 10, 0, 30*time.Minute),
	}
	gs[0].Bound = now.Add(-time.Minute)
	gs[2].Bound = now
	gs[4].Bound = now.Add(time.Minute)
	c := cfg()
	c.WaitBound, c.ShortestFirst = true, true
	var got []string
	for _, q := range order(gs, now, c) {
		got = append(got, q.Key.Job)
	}
	must.Eq(t, []string{"long-overdue", "mid-overdue", "short", "mid-bound-ahead", "long"}, got)
	// the bound alone: past it first, then the highest response ratio
	c.ShortestFirst = false
	got = got[:0]
	for _, q := range order(gs, now, c) {
		got = append(got, q.Key.Job)
	}
	must.Eq(t, []string{"long-overdue", "mid-overdue", "long", "short", "mid-bound-ahead"}, got)
	// without WaitBound the bound is not read: highest response ratio
	c.WaitBound = false
	got = got[:0]
	for _, q := range order(gs, now, c) {
		got = append(got, q.Key.Job)
	}
	must.Eq(t, []string{"mid-overdue", "long-overdue", "long", "short", "mid-bound-ahead"}, got)
}

// One GPU frees; a long group that has waited past its bound (it would have
// started by now with no sharing, first come first served) takes it, though
// a shorter one waits: shortest first alone would start the short one and
// the long one later than exclusive FCFS would have.
func TestStepServesAGroupPastItsBoundFirst(t *testing.T) {
	run := func(bound time.Time) []string {
		s := snapshot(t, fixtures.DGX1V100)
		ends := map[string]time.Time{}
		busy(t, s, ends, "run", []int{0, 1, 2, 3, 4, 5, 6}, time.Hour)
		long := group("long", 1, 100, 2*time.Hour, 10*time.Hour)
		long.Bound = bound
		gs := []Group{long, group("short", 1, 100, time.Minute, 10*time.Minute)}
		c := cfg()
		c.WaitBound, c.ShortestFirst = true, true
		return kinds(Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, c))
	}
	must.Eq(t, []string{"pin long", "wait short"}, run(now.Add(-time.Minute)))
	must.Eq(t, []string{"pin short", "wait long"}, run(time.Time{}))        // no bound: shortest first
	must.Eq(t, []string{"pin short", "wait long"}, run(now.Add(time.Hour))) // bound ahead
}

// A multi-GPU group past its bound that does not fit holds the node that
// frees first however long that takes; one not past it holds no node that
// frees only after its own run time (EASY's rule).
func TestAGroupPastItsBoundHoldsNodesHoweverLong(t *testing.T) {
	run := func(bound time.Time) []string {
		s := snapshot(t, fixtures.DGX1V100)
		ends := map[string]time.Time{}
		busy(t, s, ends, "four", []int{0, 1, 2, 3}, 5*time.Hour)
		big := group("big", 1, 800, time.Hour, time.Hour)
		big.Bound = bound
		gs := []Group{big, group("tail", 1, 100, 0, 6*time.Hour)}
		c := cfg()
		c.WaitBound, c.ShortestFirst = true, true
		return kinds(Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, c))
	}
	must.Eq(t, []string{"wait big", "reserve big", "wait tail"}, run(now))
	must.Eq(t, []string{"wait big", "pin tail"}, run(time.Time{}))
}
