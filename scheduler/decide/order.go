package decide

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

type queued struct {
	Group
	ratio   float64
	overdue bool
}

// order sorts the groups to decide, fairest first: groups of tenants with
// guaranteed capacity (a configured virtual cluster, not opportunistic),
// then the highest response ratio (waited + expected) / expected
// (queue.ResponseRatio), where expected is the group's declared run time,
// else the default. When no group declares a run time they all expect the
// default and the order is the submission order. Under cfg.WaitBound the
// groups past their wait bound (Group.Bound) come after the guaranteed
// ones, in submission order, before the others; under cfg.ShortestFirst
// the others go by expected run time, shortest first. Ties keep
// submission order, then request ID.
func order(groups []Group, now time.Time, cfg Config) []queued {
	// the keys are sorted, not the groups: a Group is large, and a stable
	// sort of 20,000 of them moved far more memory than it compared
	type key struct {
		i          int
		guaranteed bool
		overdue    bool
		ratio      float64
		expected   time.Duration
		submit     int64
	}
	keys := make([]key, len(groups))
	for i, g := range groups {
		keys[i] = key{i: i, guaranteed: guaranteed(g.Req, cfg.VCs), ratio: responseRatio(g, now, cfg.DefaultExpected), submit: unixNano(g.Submit)}
		keys[i].overdue = cfg.WaitBound && Overdue(g, now)
		keys[i].expected = expectedOf(g, cfg.DefaultExpected)
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.guaranteed != b.guaranteed {
			if a.guaranteed {
				return -1
			}
			return 1
		}
		if a.overdue != b.overdue {
			if a.overdue {
				return -1
			}
			return 1
		}
		switch {
		case a.overdue: // submission order
		case cfg.ShortestFirst:
			if c := cmp.Compare(a.expected, b.expected); c != 0 {
				return c
			}
		default:
			if c := cmp.Compare(b.ratio, a.ratio); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.submit, b.submit); c != 0 {
			return c
		}
		return cmp.Compare(groups[a.i].Req.ID, groups[b.i].Req.ID)
	})
	out := make([]queued, len(keys))
	for j, k := range keys {
		out[j] = queued{Group: groups[k.i], ratio: k.ratio, overdue: k.overdue}
	}
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

// Overdue reports whether group g has waited past its wait bound
// (Group.Bound) at now; a group with no bound never is.
func Overdue(g Group, now time.Time) bool {
	return !g.Bound.IsZero() && !g.Bound.After(now)
}

// expectedOf is a group's declared run time, else the default.
func expectedOf(g Group, def time.Duration) time.Duration {
	if g.Req.Expected > 0 {
		return g.Req.Expected
	}
	return def
}

// responseRatio is queue.ResponseRatio of a group at now; a group whose
// submission time is unknown counts as just submitted.
func responseRatio(g Group, now time.Time, def time.Duration) float64 {
	expected := expectedOf(g, def)
	var waited time.Duration
	if !g.Submit.IsZero() {
		waited = now.Sub(g.Submit)
	}
	return queue.ResponseRatio(waited, expected)
}

// learnedNote says, in a waiting group's reason, the run time its order
// was learned from its family's finished runs (placement.Request's
// LearnedFrom; none declared), or nothing.
func learnedNote(r placement.Request) string {
	switch {
	case r.LearnedFrom == 1:
		return fmt.Sprintf(", expected run time %s as its last run took", r.Expected.Round(time.Second))
	case r.LearnedFrom > 1:
		return fmt.Sprintf(", expected run time %s, the median of its last %d runs", r.Expected.Round(time.Second), r.LearnedFrom)
	}
	return ""
}
