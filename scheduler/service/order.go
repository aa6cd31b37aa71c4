package service

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/queue"
)

// order sorts the groups to decide, fairest first: groups of tenants with
// guaranteed capacity, then the highest response ratio (waited + expected)
// / expected (queue.ResponseRatio), where expected is the group's
// gpushare.expected_runtime, else def. When no group declares a run time
// they all expect def and the order is the submission order. It is the
// queue order behind gpushare's average JCT on the Gavel traces
// (docs/results). Ties keep submission order, then request ID.
func order(todo []work, now time.Time, def time.Duration) {
	ratio := make(map[string]float64, len(todo))
	for _, w := range todo {
		ratio[w.req.ID] = responseRatio(w, now, def)
	}
	slices.SortStableFunc(todo, func(a, b work) int {
		if ga, gb := guaranteed(a.req), guaranteed(b.req); ga != gb {
			if ga {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(ratio[b.req.ID], ratio[a.req.ID]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.submit, b.submit); c != 0 {
			return c
		}
		return cmp.Compare(a.req.ID, b.req.ID)
	})
}

// responseRatio is queue.ResponseRatio for a group submitted at w.submit
// (Unix nanoseconds; 0: unknown, counts as just submitted).
func responseRatio(w work, now time.Time, def time.Duration) float64 {
	expected := w.req.Expected
	if expected <= 0 {
		expected = def
	}
	var waited time.Duration
	if w.submit > 0 {
		waited = now.Sub(time.Unix(0, w.submit))
	}
	return queue.ResponseRatio(waited, expected)
}
