package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestRunsExpectedIsTheMedian(t *testing.T) {
	var r Runs
	must.EqOp(t, 0, r.Expected(), must.Sprint("no run: nothing learned"))
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	add := func(alloc string, end int, took time.Duration) bool {
		var changed bool
		r, changed = r.With(Run{Alloc: alloc, Ended: t0.Add(time.Duration(end) * time.Hour), Took: took})
		return changed
	}
	must.True(t, add("a", 1, time.Hour))
	must.EqOp(t, time.Hour, r.Expected())
	must.True(t, add("b", 2, 3*time.Hour))
	must.EqOp(t, 2*time.Hour, r.Expected(), must.Sprint("even: the mean of the middle two"))
	// one run that hung moves the median by a place, not by its length
	must.True(t, add("c", 3, 100*time.Hour))
	must.EqOp(t, 3*time.Hour, r.Expected())

	// the same allocation seen again, or a run of no length, adds nothing
	must.False(t, add("b", 2, 3*time.Hour))
	must.False(t, add("d", 4, 0))
	must.False(t, add("", 4, time.Hour))
	must.Len(t, 3, r)
}

// At most RunsKept runs, the latest by their end, whatever order they are
// seen in (a listing after a restart brings them in any order).
func TestRunsKeepTheLatestWhateverTheOrder(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	run := func(i int) Run {
		return Run{Alloc: fmt.Sprint("alloc-", i), Ended: t0.Add(time.Duration(i) * time.Hour), Took: time.Duration(i) * time.Minute}
	}
	var inOrder, reversed Runs
	for i := 1; i <= 20; i++ {
		inOrder, _ = inOrder.With(run(i))
		reversed, _ = reversed.With(run(21 - i))
	}
	must.Eq(t, inOrder, reversed)
	must.Len(t, RunsKept, inOrder)
	must.EqOp(t, "alloc-12", inOrder[0].Alloc, must.Sprint("the oldest kept is the ninth newest"))
	must.EqOp(t, 16*time.Minute, inOrder.Expected())
	// an older run than every kept one, seen again after the list filled,
	// changes nothing
	_, changed := inOrder.With(run(3))
	must.False(t, changed)
	// the caller's list is not changed by With
	before := append(Runs(nil), inOrder...)
	_, changed = inOrder.With(run(30))
	must.True(t, changed)
	must.Eq(t, before, inOrder)
}
