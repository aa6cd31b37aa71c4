package gavel

import (
	"testing"

	"github.com/shoenig/test/must"
)

// The wait bound (gpushare-bounded): on one GPU, a long job (500 s) arrives behind a running
// one and a stream of short jobs (50 s) behind it. Exclusive FCFS starts it
// at 100 s, when the GPU frees; shortest first alone, or the highest
// response ratio, would start the short jobs first. gpushare orders the
// queue shortest first but serves the long job once its shadow start has
// passed (and its completion reaches the shadow's tail): it starts at 100
// s, no later than under exclusive; gpushare, the response-ratio order
// without the bound, starts it later.
func TestWaitBoundServesAJobByItsExclusiveStart(t *testing.T) {
	thr := tinyThroughputs(t)
	jobs := []Job{{Type: "C", Steps: 100, Scale: 1}, {Type: "C", Steps: 500, Arrival: 1, Scale: 1}}
	for _, at := range []float64{2, 90, 140, 190, 240, 290} {
		jobs = append(jobs, Job{Type: "C", Steps: 50, Arrival: at, Scale: 1})
	}
	start := func(policy string) float64 {
		t.Helper()
		out, _, err := Simulate(policy, jobs, oneGPU, thr, Options{Model: tinyModel(), MaxSlowdown: 0.4})
		must.NoError(t, err)
		for _, o := range out {
			must.True(t, o.Placed)
			must.Eq(t, 0.0, o.SharedFor) // two C jobs never pair under the bound of 0.4
		}
		return out[1].Start
	}
	must.Eq(t, 100.0, start("exclusive"))
	must.Eq(t, 100.0, start("gpushare-bounded"))
	must.Greater(t, 100.0, start("gpushare"))
}
