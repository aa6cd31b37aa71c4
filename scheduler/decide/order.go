package decide

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

type queued struct {
	Group
	ratio float64
}

// order sorts the groups to decide, fairest first: groups of tenants with
// guaranteed capacity (a configured virtual cluster, not opportunistic),
// then the highest response ratio (waited + expected) / expected
// (queue.ResponseRatio), where expected is the group's declared run time,
// else the default. When no group declares a run time they all expect the
// default and the order is the submission order. Ties keep submission
// order, then request ID.
func order(groups []Group, now time.Time, cfg Config) []queued {
	out := make([]queued, len(groups))
	for i, g := range groups {
		out[i] = queued{Group: g, ratio: responseRatio(g, now, cfg.DefaultExpected)}
	}
	slices.SortStableFunc(out, func(a, b queued) int {
		if ga, gb := guaranteed(a.Req, cfg.VCs), guaranteed(b.Req, cfg.VCs); ga != gb {
			if ga {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(b.ratio, a.ratio); c != 0 {
			return c
		}
		if c := cmp.Compare(unixNano(a.Submit), unixNano(b.Submit)); c != 0 {
			return c
		}
		return cmp.Compare(a.Req.ID, b.Req.ID)
	})
	return out
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// guaranteed reports whether a request counts against a configured
// virtual cluster's guarantee.
func guaranteed(r placement.Request, vcs []string) bool {
	return r.VC != "" && r.Class != placement.ClassOpportunistic && slices.Contains(vcs, r.VC)
}

// responseRatio is queue.ResponseRatio of a group at now; a group whose
// submission time is unknown counts as just submitted.
func responseRatio(g Group, now time.Time, def time.Duration) float64 {
	expected := g.Req.Expected
	if expected <= 0 {
		expected = def
	}
	var waited time.Duration
	if !g.Submit.IsZero() {
		waited = now.Sub(g.Submit)
	}
	return queue.ResponseRatio(waited, expected)
}
