package gavel

import (
	"maps"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// tsMemory gives the tiny types' memory: three A (5 GB) fit a 16 GB GPU,
// four do not; a C (12 GB) fits beside nothing but a C... which it may
// not join either (12 + 12 > 16).
var tsMemory = map[string]float64{"A": 5, "B": 2, "C": 12}

// On one GPU, FIFO queueing runs four jobs one after the other;
// time-sliced, three start at once and take turns (the fourth's memory
// does not fit), every job ends, and the average JCT is lower.
func TestTimeslicedJobsTakeTurnsWithinMemory(t *testing.T) {
	thr := tinyThroughputs(t)
	jobs := []Job{{Type: "A", Steps: 1000, Scale: 1}, {Type: "A", Steps: 100, Arrival: 1, Scale: 1},
		{Type: "A", Steps: 100, Arrival: 2, Scale: 1}, {Type: "A", Steps: 100, Arrival: 3, Scale: 1}}
	queued, _, err := Simulate("exclusive", jobs, oneGPU, thr, Options{})
	must.NoError(t, err)

	ts := Timeslice{On: true, MemoryGB: tsMemory}
	var rounds, maxOn, turns int
	opts := Options{Timeslice: ts, afterStep: func(s *sim) {
		rounds++
		used := 0
		for _, ids := range s.onGPU {
			maxOn = max(maxOn, len(ids))
			for _, id := range ids {
				r := s.run[id]
				must.True(t, r.ts)
				// in turn: each of n gets its isolated rate for 1/n of the time, less the switches
				must.InDelta(t, r.iso*s.opts.Timeslice.slice(len(ids)), r.rate, 1e-12)
				used += len(r.shares)
				if len(ids) > 1 {
					turns++
				}
			}
		}
		must.LessEq(t, 100, used) // their memory fits the GPU
	}}
	out, util, err := Simulate("exclusive", jobs, oneGPU, thr, opts)
	must.NoError(t, err)
	must.Positive(t, rounds)
	must.Positive(t, turns)
	must.EqOp(t, 3, maxOn) // the fourth A's memory does not fit beside three
	must.Eq(t, 1.0, util)
	var starts []float64
	for _, o := range out {
		must.True(t, o.Placed)
		must.Positive(t, o.Finish)
		starts = append(starts, o.Start)
	}
	must.Eq(t, []float64{0, 1, 2}, starts[:3]) // started at arrival
	must.Greater(t, 3.0, starts[3])            // the fourth waited for memory
	must.Less(t, avgJCT(queued), avgJCT(out))
	// the work done is the same: the time-sliced run ends no earlier than
	// the GPU's work plus its switches allow, and the queue runs dry
	last := slices.MaxFunc(out, func(a, b Outcome) int { return int(a.Finish - b.Finish) })
	must.GreaterEq(t, 1300.0, last.Finish)
}

// A pair Gavel measured unable to share (A and C) is never time-sliced
// together, nor are jobs whose memory would exceed the GPU's (two C).
func TestTimeslicedRespectsMeasuredFitAndMemory(t *testing.T) {
	thr := tinyThroughputs(t)
	small := map[string]float64{"A": 2, "C": 2} // memory is no bound
	for _, c := range []struct {
		pair [2]string
		mem  map[string]float64
	}{{[2]string{"A", "C"}, small}, {[2]string{"C", "C"}, tsMemory}} {
		pair := c.pair
		jobs := []Job{{Type: pair[0], Steps: 100, Scale: 1}, {Type: pair[1], Steps: 50, Arrival: 10, Scale: 1}}
		out, _, err := Simulate("exclusive", jobs, oneGPU, thr, Options{Timeslice: Timeslice{On: true, MemoryGB: c.mem}})
		must.NoError(t, err)
		must.Eq(t, 100.0, out[1].Start, must.Sprint(pair)) // waited for the first to end
		must.Eq(t, 0.0, out[0].SharedFor)
	}
	// A and B fit: B joins at once
	opts := Options{Timeslice: Timeslice{On: true, MemoryGB: tsMemory}}
	out, _, err := Simulate("exclusive", []Job{{Type: "A", Steps: 100, Scale: 1}, {Type: "B", Steps: 50, Arrival: 10, Scale: 1}}, oneGPU, thr, opts)
	must.NoError(t, err)
	must.Eq(t, 10.0, out[1].Start)
	must.Positive(t, out[0].SharedFor)
}

// At most MaxPerGPU time-sliced jobs share a GPU, though six fit its
// memory.
func TestTimeslicedAtMostMaxPerGPUInTheSimulator(t *testing.T) {
	thr := tinyThroughputs(t)
	var jobs []Job
	for i := range 6 {
		jobs = append(jobs, Job{Type: "A", Steps: 100, Arrival: float64(i), Scale: 1})
	}
	for _, limit := range []int{2, 4} {
		most := 0
		opts := Options{Timeslice: Timeslice{On: true, MaxPerGPU: limit, MemoryGB: map[string]float64{"A": 2}}, afterStep: func(s *sim) {
			for _, ids := range s.onGPU {
				most = max(most, len(ids))
			}
		}}
		_, _, err := Simulate("exclusive", jobs, oneGPU, thr, opts)
		must.NoError(t, err)
		must.EqOp(t, limit, most)
	}
}

func TestTimesliceBadInput(t *testing.T) {
	thr := tinyThroughputs(t)
	jobs := []Job{{Type: "A", Steps: 100, Scale: 1}}
	_, _, err := Simulate("gpushare", jobs, oneGPU, thr, Options{Timeslice: Timeslice{On: true, MemoryGB: tsMemory}})
	must.ErrorContains(t, err, "under the exclusive policy")
	_, _, err = Simulate("exclusive", jobs, oneGPU, thr, Options{Timeslice: Timeslice{On: true, Quantum: 0.1, SwitchCost: 0.2, MemoryGB: tsMemory}})
	must.ErrorContains(t, err, "leaves nothing")
	_, _, err = Simulate("exclusive", jobs, oneGPU, thr, Options{Timeslice: Timeslice{On: true}})
	must.ErrorContains(t, err, `no GPU memory estimate for job type "A"`)
	// every Gavel job type has an estimate that fits a GPU of each type
	// Gavel measured, in more of a K80's 12 GB than of a V100's 16
	gpus, err := Embedded().GPUs()
	must.NoError(t, err)
	must.SliceContainsAll(t, gpus, slices.Collect(maps.Keys(GPUMemoryGB)))
	for _, gpu := range gpus {
		all, err := Embedded().ThroughputsOf(gpu)
		must.NoError(t, err)
		for k := range all.iso {
			n, err := (&Timeslice{}).shares(k.typ, gpu)
			must.NoError(t, err)
			must.Between(t, 1, n, 100)
		}
	}
	v100, err := (&Timeslice{}).shares("ResNet-50 (batch size 128)", "v100")
	must.NoError(t, err)
	k80, err := (&Timeslice{}).shares("ResNet-50 (batch size 128)", "k80")
	must.NoError(t, err)
	must.EqOp(t, 69, v100) // 11 of 16 GB
	must.EqOp(t, 92, k80)  // 11 of 12 GB
	// a job larger than the GPU, and a GPU type of unknown memory
	_, err = (&Timeslice{MemoryGB: map[string]float64{"A": 14}}).shares("A", "k80")
	must.ErrorContains(t, err, "more than a K80's 12 GB")
	_, err = (&Timeslice{}).shares("A3C", "a100")
	must.ErrorContains(t, err, "memory of GPU type A100 is not known (known: k80, p100, v100)")
}

func avgJCT(out []Outcome) float64 {
	sum := 0.0
	for _, o := range out {
		sum += o.JCT()
	}
	return sum / float64(len(out))
}
