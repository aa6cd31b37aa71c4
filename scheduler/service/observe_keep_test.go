package service

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// A group keeps its last maxObservations samples, and the records' list
// of groups wanted forgets the others.
func TestObservationsKeepTheLatest(t *testing.T) {
	o := observations{}
	for i := range maxObservations + 5 {
		o.add("a", interference.Observation{SMUtilPct: float64(i)})
	}
	list := o.add("b", interference.Observation{SMUtilPct: 1})
	must.SliceLen(t, 1, list)
	must.SliceLen(t, maxObservations, o["a"])
	must.Eq(t, 5.0, o["a"][0].SMUtilPct, must.Sprint("the oldest five dropped"))
	o.forget(map[string]bool{"b": true})
	must.MapNotContainsKey(t, o, "a")
	must.MapContainsKey(t, o, "b")
}
