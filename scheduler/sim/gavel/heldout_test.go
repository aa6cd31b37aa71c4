package gavel

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// A held-out model is fitted on its fold of the measured pairs only (the
// pairs that could share), once per process, and a fold that does not
// exist is refused.
func TestHeldOutModelIsFittedOnItsFold(t *testing.T) {
	thr := tinyThroughputs(t)
	must.SliceLen(t, 4, thr.rows) // the v100 rows of pairCSV
	for fold := range uint32(2) {
		m := heldOutModel(thr, 2, fold)
		must.Eq(t, m, heldOutModel(thr, 2, fold))
		_, in := interference.Fold(thr.rows, 2, fold)
		names := map[string]bool{}
		for _, p := range in {
			if p.Fits() {
				names[p.A], names[p.B] = true, true
			}
		}
		must.Eq(t, len(names), len(m.Profiles))
		for n := range names {
			_, ok := m.Lookup(n)
			must.True(t, ok)
		}
	}
	_, _, err := Simulate("gpushare", []Job{{Type: "A", Steps: 1, Scale: 1}}, oneGPU, thr, Options{Robustness: Robustness{FitFolds: 2, FitFold: 2}})
	must.ErrorContains(t, err, "fit fold 3 of 2")
	must.False(t, Robustness{FitFolds: 2}.Exact())
	must.False(t, Robustness{FitFolds: 2}.RuntimesOnly())
}
