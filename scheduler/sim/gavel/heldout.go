package gavel

import (
	"fmt"
	"math"
	"sync"

	"github.com/gpushare/gpushare/scheduler/interference"
)

// A held-out run stands for a GPU type the interference model was not
// fitted on: the simulated cluster runs at all of Gavel's measured
// throughputs, but gpushare's model (its profiles, overhead and
// uncertainty) is fitted on one fold of the measured pairs only, so that
// most pairs it meets were never part of its fit. Its uncertainty is what
// it says of itself: its own 5-fold cross-validated RMSE on the pairs it
// was fitted on.

// HeldOutConditions are the held-out runs `-held-out` reports: the model
// fitted on either half of the pairs, and on a quarter.
var HeldOutConditions = []Robustness{
	{Name: "held out: fitted on fold 1 of 2", FitFolds: 2, FitFold: 0},
	{Name: "held out: fitted on fold 2 of 2", FitFolds: 2, FitFold: 1},
	{Name: "held out: fitted on fold 1 of 4", FitFolds: 4, FitFold: 0},
}

type fitKey struct {
	thr     *Throughputs
	k, fold uint32
}

type fitted struct {
	once sync.Once
	m    *interference.Model
}

var fits sync.Map // fitKey -> *fitted

// heldOutModel is the model fitted on fold `fold` of k of thr's measured
// pairs only (a hash of each unordered pair decides its fold, as in
// interference.Fold), with its own cross-validated RMSE as uncertainty.
// It is fitted once per process.
func heldOutModel(thr *Throughputs, k, fold uint32) *interference.Model {
	v, _ := fits.LoadOrStore(fitKey{thr, k, fold}, &fitted{})
	f := v.(*fitted)
	f.once.Do(func() {
		_, train := interference.Fold(thr.rows, k, fold)
		f.m = interference.Fit(train)
		var sq float64
		var n int
		for i := range uint32(5) {
			tr, te := interference.Fold(train, 5, i)
			e := interference.Fit(tr).Evaluate(te)
			sq += e.RMSE * e.RMSE * float64(e.Jobs)
			n += e.Jobs
		}
		if n > 0 {
			f.m.Uncertainty = math.Sqrt(sq / float64(n))
		}
	})
	return f.m
}

// checkFit reports a held-out fold that does not exist.
func (r Robustness) checkFit() error {
	if r.FitFolds > 0 && r.FitFold >= r.FitFolds {
		return fmt.Errorf("fit fold %d of %d: want a fold below %d", r.FitFold+1, r.FitFolds, r.FitFolds)
	}
	return nil
}
