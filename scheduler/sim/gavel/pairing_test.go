package gavel

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// dThroughputs adds job type D to the tiny ones: two D jobs run at a
// measured 0.45 of alone each, within a slowdown bound of 0.6 but slower
// together than one after the other.
func dThroughputs(t *testing.T) *Throughputs {
	thr, err := ReadThroughputs(strings.NewReader(isoCSV+"v100,D,1,1\n"),
		strings.NewReader(pairCSV+"v100,D,1,D,1,1,1,0.45,0.45,0.45,0.45\n"))
	must.NoError(t, err)
	return thr
}

// dModel predicts two D jobs, like two A jobs, at 0.833 of alone each
// (they demand 1.2 of the SMs), with uncertainty unc.
func dModel(unc float64) *interference.Model {
	m := tinyModel()
	m.Profiles["d"] = interference.Profile{Name: "D", SM: 0.6}
	m.Uncertainty = unc
	return m
}

// An unobserved pair predicted good (0.833 each) runs at 0.45 each: within
// the bound of 0.6, so the bound alone keeps it, but seen 5 s after it
// forms it is slower, summed over both jobs, than one after the other
// even if job 1 waited for job 0 to end: job 1 is moved (losing its 2.25
// steps), the pair is not formed again, and job 1 runs its 50 steps after
// job 0 ends at 15 + 87.75 s.
func TestUnobservedPairSeenLosingIsUnpaired(t *testing.T) {
	jobs := []Job{{Type: "D", Steps: 100, Scale: 1}, {Type: "D", Steps: 50, Arrival: 10, Scale: 1}}
	var unpairs []string
	opts := Options{Model: dModel(0), MaxSlowdown: 0.6, ObserveAfter: 5, OnStep: func(now float64, as []decide.Action) {
		for _, a := range as {
			if a.Kind == decide.Unpair {
				unpairs = append(unpairs, a.Group.Job)
				must.Eq(t, 15.0, now)
				must.StrContains(t, a.Reason, "than one after the other")
			}
		}
	}}
	out, _, err := Simulate("gpushare", jobs, oneGPU, dThroughputs(t), opts)
	must.NoError(t, err)
	must.Eq(t, []string{"job-000001"}, unpairs)
	must.Eq(t, 10.0, out[1].Start) // paired first: predicted good
	must.Eq(t, 1, out[1].Moves)
	must.InDelta(t, 2.25, out[1].Lost, 1e-9)
	must.InDelta(t, 102.75, out[0].Finish, 1e-6)
	must.InDelta(t, 152.75, out[1].Finish, 1e-6)
}

// A job is not paired when, one uncertainty below its prediction, it would
// end later sharing than waiting for the GPU and running alone. Job 1 (200
// s alone) finds job 0 with 90 s left; the model predicts 0.833 each:
// shared, job 1 would end 218 s from now against 290 s waiting. With an
// uncertainty of 0.35 (within the bound: 0.17 + 0.35 <= 0.6) it may run at
// 0.483 each: shared it would end 296 s from now, later than waiting, so
// it waits for the GPU (starts at 100 s). Sure of the model, it pairs.
func TestNoPairWhosePessimisticTailExceedsAlone(t *testing.T) {
	jobs := []Job{{Type: "A", Steps: 100, Scale: 1}, {Type: "A", Steps: 200, Arrival: 10, Scale: 1}}
	out, _, err := Simulate("gpushare", jobs, oneGPU, tinyThroughputs(t), Options{Model: dModel(0.35), MaxSlowdown: 0.6})
	must.NoError(t, err)
	must.Eq(t, 100.0, out[1].Start)
	must.InDelta(t, 300, out[1].Finish, 1e-6)
	must.Eq(t, 0.0, out[1].SharedFor)

	out, _, err = Simulate("gpushare", jobs, oneGPU, tinyThroughputs(t), Options{Model: dModel(0.01), MaxSlowdown: 0.6})
	must.NoError(t, err)
	must.Eq(t, 10.0, out[1].Start)
	must.Greater(t, 0.0, out[1].SharedFor)
}

// What is learned of a GPU model narrows with observations: short A jobs
// pair one after another with a long one; each pairing is observed, and
// the uncertainty of the next pairing's prediction shrinks, while the
// prediction moves from the model's 0.833 towards the measured 0.6. A B
// job, never seen on this GPU model, then joins: the model predicts no
// slowdown for A and B (0.9 of the SMs), but it was seen 0.23 too
// optimistic here, so B's prediction is lowered and its uncertainty is the
// model's error learned here, wider than the model's own 0.1.
func TestBeliefNarrowsWithObservations(t *testing.T) {
	jobs := []Job{{Type: "A", Steps: 2000, Scale: 1}}
	for i := range 4 {
		jobs = append(jobs, Job{Type: "A", Steps: 20, Arrival: 10 + 100*float64(i), Scale: 1})
	}
	jobs = append(jobs, Job{Type: "B", Steps: 40, Arrival: 500, Scale: 1})
	var errs, preds []float64
	m := dModel(0.1)
	m.Profiles["b"] = interference.Profile{Name: "B", SM: 0.3}
	opts := Options{Model: m, MaxSlowdown: 0.6, ObserveAfter: 5, OnStep: func(_ float64, as []decide.Action) {
		for _, a := range as {
			if a.Kind == decide.Pin && a.Group.Job != "job-000000" {
				p := a.Decision.Placements[0]
				errs, preds = append(errs, p.PredictedErr), append(preds, p.Predicted)
			}
		}
	}}
	out, _, err := Simulate("gpushare", jobs, oneGPU, tinyThroughputs(t), opts)
	must.NoError(t, err)
	must.SliceLen(t, 5, errs)
	must.InDelta(t, 0.1, errs[0], 1e-9) // nothing seen: the model's own
	must.InDelta(t, 5.0/6, preds[0], 1e-9)
	for i := 1; i < 4; i++ {
		must.Less(t, errs[i-1], errs[i])
		must.Less(t, preds[i-1], preds[i])
		must.Greater(t, 0.6, preds[i])
	}
	t.Logf("B: predicted %.3f, uncertainty %.3f", preds[4], errs[4])
	must.Less(t, 0.97, preds[4])
	must.Greater(t, 0.1, errs[4])
	for _, o := range out[1:] {
		must.Eq(t, 0, o.Moves)
		must.Greater(t, 0.0, o.SharedFor)
	}
}
