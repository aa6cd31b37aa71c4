package queue

import (
	"slices"
	"strings"
	"time"
)

// RunsKept is how many of a group's latest finished runs Runs keeps.
const RunsKept = 9

// Run is one finished allocation of a group: which, when it ended, and
// how long it ran (its tasks' first start to their last finish).
type Run struct {
	Alloc string        `json:"alloc"`
	Ended time.Time     `json:"ended"`
	Took  time.Duration `json:"took"`
}

// Runs are a group's latest finished runs, by when they ended, oldest
// first, at most RunsKept: what a group that declares no run time is
// expected to take (Expected). Most batch work on a shared cluster comes
// back (a pipeline registering the same file, a periodic job's launches, a
// parameterized job's dispatches), and the previous runs of the same work
// predict the next far better than one default for every job does.
type Runs []Run

// With returns r with run x added in the order of ends, the oldest dropped
// past RunsKept, and whether it changed: a run already kept (the same
// allocation seen again, in a listing after a restart), one older than
// every run of a full list, or one of no length is not added, so the list
// is the same whatever order the runs are seen in.
func (r Runs) With(x Run) (Runs, bool) {
	if x.Took <= 0 || x.Alloc == "" || slices.ContainsFunc(r, func(y Run) bool { return y.Alloc == x.Alloc }) {
		return r, false
	}
	i, _ := slices.BinarySearchFunc(r, x, func(a, b Run) int {
		if c := a.Ended.Compare(b.Ended); c != 0 {
			return c
		}
		return strings.Compare(a.Alloc, b.Alloc)
	})
	if len(r) >= RunsKept && i == 0 {
		return r, false
	}
	out := slices.Insert(slices.Clone(r), i, x)
	if len(out) > RunsKept {
		out = out[len(out)-RunsKept:]
	}
	return out, true
}

// Expected is the median of the kept runs (the mean of the middle two of
// an even number), 0 when there are none. The median, not the mean: one
// run that hung, or that was given a tenth of the work, moves it by one
// place, not by its length.
func (r Runs) Expected() time.Duration {
	if len(r) == 0 {
		return 0
	}
	d := make([]time.Duration, len(r))
	for i, x := range r {
		d[i] = x.Took
	}
	slices.Sort(d)
	m := len(d) / 2
	if len(d)%2 == 1 {
		return d[m]
	}
	return d[m-1] + (d[m]-d[m-1])/2
}
