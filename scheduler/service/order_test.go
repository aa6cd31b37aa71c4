package service

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

func TestOrder(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) int64 { return now.Add(-ago).UnixNano() }
	w := func(id string, ago, expected time.Duration, vc string) work {
		return work{req: placement.Request{ID: id, Expected: expected, VC: vc}, submit: at(ago)}
	}
	ids := func(ws []work) []string {
		var out []string
		for _, x := range ws {
			out = append(out, x.req.ID)
		}
		return out
	}

	// Nothing declared: submission order, guaranteed tenants first.
	todo := []work{w("c", 1*time.Minute, 0, ""), w("a", 3*time.Minute, 0, ""), w("g", 0, 0, "research"), w("b", 2*time.Minute, 0, "")}
	order(todo, now, time.Hour)
	must.Eq(t, []string{"g", "a", "b", "c"}, ids(todo))

	// Declared run times: ratios (waited + expected) / expected are
	// long 1.05 (30m of 10h), short 1.2 (1m of 5m), plain 3 (2h of the 1h
	// default): the job that waited twice its expected run time first, then
	// the short one ahead of the long one that arrived earlier.
	todo = []work{w("long", 30*time.Minute, 10*time.Hour, ""), w("short", time.Minute, 5*time.Minute, ""), w("plain", 2*time.Hour, 0, "")}
	order(todo, now, time.Hour)
	must.Eq(t, []string{"plain", "short", "long"}, ids(todo))

	// No starvation: after waiting 10 h the long job (ratio 2) goes ahead
	// of a 5-minute job that has just arrived (ratio 1).
	todo = []work{w("new-short", 0, 5*time.Minute, ""), w("long", 10*time.Hour, 10*time.Hour, "")}
	order(todo, now, time.Hour)
	must.Eq(t, []string{"long", "new-short"}, ids(todo))

	// Equal ratios (2) keep submission order, then ID; an unknown submit
	// time counts as just submitted.
	todo = []work{w("y", time.Hour, time.Hour, ""), w("x", time.Hour, time.Hour, ""), {req: placement.Request{ID: "unknown"}}, w("z", 2*time.Hour, 2*time.Hour, "")}
	order(todo, now, time.Hour)
	must.Eq(t, []string{"z", "x", "y", "unknown"}, ids(todo))
}

func TestResponseRatio(t *testing.T) {
	now := time.Unix(1000, 0)
	must.EqOp(t, 2.0, responseRatio(work{req: placement.Request{Expected: 100 * time.Second}, submit: time.Unix(900, 0).UnixNano()}, now, time.Hour))
	must.EqOp(t, 1.0, responseRatio(work{submit: time.Unix(1000, 0).UnixNano()}, now, time.Hour))
	must.EqOp(t, 2.0, responseRatio(work{submit: time.Unix(0, 0).UnixNano() + 1}, now, 1000*time.Second-1)) // default used
	// a submit time in the future (clock skew) counts as no wait; expected
	// below a second counts as a second
	must.EqOp(t, 1.0, responseRatio(work{submit: time.Unix(2000, 0).UnixNano()}, now, time.Millisecond))
}
