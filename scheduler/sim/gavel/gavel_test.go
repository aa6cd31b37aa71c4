package gavel

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestReadTrace(t *testing.T) {
	line := func(typ, steps, arr, scale string) string {
		return typ + "\tcd %s && python3 train.py\t-n\t1\t" + steps + "\t" + arr + "\t" + scale + "\n"
	}
	cases := []struct {
		name, in string
		want     []Job
		err      bool
	}{
		{"sorted by arrival", line("A", "100", "5.000000", "1") + line("B", "20", "0.000000", "2"),
			[]Job{{ID: 1, Type: "B", Steps: 20, Arrival: 0, Scale: 2}, {ID: 0, Type: "A", Steps: 100, Arrival: 5, Scale: 1}}, false},
		{"blank lines skipped", "\n" + line("A", "1", "0", "1"), []Job{{Type: "A", Steps: 1, Scale: 1}}, false},
		{"six fields", "A\tcmd\t-n\t1\t100\t0\n", nil, true},
		{"zero scale", line("A", "100", "0", "0"), nil, true},
		{"bad steps", line("A", "x", "0", "1"), nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadTrace(strings.NewReader(c.in))
			if c.err {
				must.True(t, errors.Is(err, ErrFormat))
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

const isoCSV = `gpu_type,job_type,scale_factor,throughput_steps_per_s
v100,A,1,1
v100,A,2,1.5
v100_unconsolidated,A,2,1.2
v100,B,1,2
v100,C,1,1
`

const pairCSV = `gpu_type,job_a,scale_a,job_b,scale_b,iso_thr_a,iso_thr_b,coloc_thr_a,coloc_thr_b,norm_a,norm_b
v100,A,1,A,1,1,1,0.6,0.6,0.6,0.6
v100,A,1,B,1,1,2,0.5,1.5,0.5,0.75
v100,A,1,C,1,1,1,0,0,0.0,0.0
v100,C,1,C,1,1,1,0.4,0.4,0.4,0.4
v100_unconsolidated,A,1,B,1,1,2,0.1,0.1,0.1,0.05
`

func tinyThroughputs(t *testing.T) *Throughputs {
	thr, err := ReadThroughputs(strings.NewReader(isoCSV), strings.NewReader(pairCSV))
	must.NoError(t, err)
	return thr
}

func TestThroughputs(t *testing.T) {
	thr := tinyThroughputs(t)
	cases := []struct {
		typ          string
		scale        int
		consolidated bool
		want         float64
	}{
		{"A", 1, true, 1}, {"A", 2, true, 1.5}, {"A", 2, false, 1.2},
		{"A", 1, false, 1},   // no unconsolidated row: the server's
		{"A", 3, true, 2.25}, // unmeasured: the 2-GPU number scaled
	}
	for _, c := range cases {
		got, err := thr.Isolated(c.typ, c.scale, c.consolidated)
		must.NoError(t, err)
		must.Eq(t, c.want, got)
	}
	_, err := thr.Isolated("Z", 1, true)
	must.Error(t, err)
	na, nb, ok := thr.Pair("B", "A") // stored as A,B: reversed
	must.True(t, ok)
	must.Eq(t, 0.75, na)
	must.Eq(t, 0.5, nb)
	_, _, ok = thr.Pair("A", "C") // measured 0: cannot share
	must.False(t, ok)
}

// TestEmbeddedData checks the shipped copies (data/README.md): 15 MSR
// traces, 83 job types x scale factors per GPU type.
func TestEmbeddedData(t *testing.T) {
	d := Embedded()
	names, err := d.TraceNames()
	must.NoError(t, err)
	must.SliceLen(t, 15, names)
	total := 0
	for _, n := range names {
		jobs, err := d.Trace(n)
		must.NoError(t, err)
		total += len(jobs)
	}
	must.EqOp(t, 15264, total)
	thr, err := d.Throughputs()
	must.NoError(t, err)
	must.MapLen(t, 166, thr.iso)
	v, err := thr.Isolated("Transformer (batch size 128)", 8, true)
	must.NoError(t, err)
	must.Eq(t, 30.88352104398441, v)
	for _, tr := range DefaultTraces {
		must.SliceContains(t, names, tr)
	}
}

// The other GPU types Gavel measured ship too (data/README.md: converted
// from simulation_throughputs.json as the V100 files were): each reads its
// own rows only, a throughput Gavel did not measure (0) is scaled from the
// measured ones, and an unknown type names the known ones.
func TestThroughputsOfEachGPUType(t *testing.T) {
	d := Embedded()
	gpus, err := d.GPUs()
	must.NoError(t, err)
	must.Eq(t, []string{"k80", "p100", "v100"}, gpus)
	k80, err := d.ThroughputsOf("k80")
	must.NoError(t, err)
	v, err := k80.Isolated("ResNet-18 (batch size 16)", 1, true)
	must.NoError(t, err)
	must.Eq(t, 4.795294551566172, v)
	one, err := k80.Isolated("ResNet-50 (batch size 128)", 1, true)
	must.NoError(t, err)
	two, err := k80.Isolated("ResNet-50 (batch size 128)", 2, true)
	must.NoError(t, err)
	must.Eq(t, 2*one, two, must.Sprint("measured 0 on 2 K80s: scaled from 1"))
	na, nb, ok := k80.Pair("A3C", "CycleGAN")
	must.True(t, ok)
	must.Eq(t, [2]float64{0.4262, 0.5803}, [2]float64{na, nb})
	must.SliceLen(t, 676, k80.rows, must.Sprint("the single-GPU pairs of k80, not of k80_unconsolidated"))
	v100, err := d.Throughputs()
	must.NoError(t, err)
	vn, _, _ := v100.Pair("A3C", "CycleGAN")
	must.Eq(t, 0.6358, vn)

	_, err = d.ThroughputsOf("a100")
	must.ErrorContains(t, err, `GPU type "a100": no measured throughputs (known: k80, p100, v100)`)

	// one file holding several types: each reads its own
	iso := "gpu_type,job_type,scale_factor,throughput_steps_per_s\nv100,A,1,10\nk80,A,1,2\nk80_unconsolidated,A,2,3\n"
	pairs := "gpu_type,job_a,scale_a,job_b,scale_b,norm_a,norm_b\nv100,A,1,A,1,0.5,0.5\nk80,A,1,A,1,0.4,0.4\n"
	thr, err := ReadThroughputsOf("k80", strings.NewReader(iso), strings.NewReader(pairs))
	must.NoError(t, err)
	must.Eq(t, map[isoKey]float64{{"A", 1, true}: 2, {"A", 2, false}: 3}, thr.iso)
	must.Eq(t, 0.4, thr.pair[pairKey{"A", "A"}][0])
	_, err = ReadThroughputsOf("p100", strings.NewReader(iso), strings.NewReader(pairs))
	must.ErrorContains(t, err, `no isolated throughput of GPU type "p100"`)
}

func TestPairBenefit(t *testing.T) {
	// r has 90 s left alone, j needs 50 s alone. Waiting: 90 + 140 = 230.
	// At 0.6 each, j finishes at 83.3 s and r, 50 s done, runs 40 s alone.
	must.InDelta(t, 230-(2*50/0.6+40), pairBenefit(90, 50, 0.6, 0.6), 1e-9)
	must.Greater(t, 0, pairBenefit(90, 50, 0.6, 0.6))
	// At 0.4 each the pair is slower together than in turn.
	must.Less(t, 0, pairBenefit(90, 50, 0.4, 0.4))
}

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	must.Eq(t, 10, Percentile(v, 99))
	must.Eq(t, 5, Percentile(v, 50))
	must.Eq(t, 1, Percentile(v, 1))
	must.True(t, math.IsNaN(Percentile(nil, 99)))
}

var oneGPU = Cluster{Name: "1x1", Nodes: 1, GPUsPerNode: 1}

// TestSimulateByHand replays tiny traces whose job completion times are
// worked out by hand in the comments.
func TestSimulateByHand(t *testing.T) {
	thr := tinyThroughputs(t)
	twoA := []Job{{Type: "A", Steps: 100, Arrival: 0, Scale: 1}, {Type: "A", Steps: 50, Arrival: 10, Scale: 1}}
	twoC := []Job{{Type: "C", Steps: 100, Arrival: 0, Scale: 1}, {Type: "C", Steps: 50, Arrival: 10, Scale: 1}}
	cases := []struct {
		name, policy string
		jobs         []Job
		cluster      Cluster
		jct, start   []float64
		util         float64
		unplaced     int
	}{
		// One GPU, no sharing: job 0 runs 0-100 s; job 1 waits and runs
		// 100-150 s: JCTs 100 and 140; the GPU is busy all 150 s.
		{"exclusive in turn", "exclusive", twoA, oneGPU, []float64{100, 140}, []float64{0, 100}, 1, 0},
		{"hived in turn", "hived", twoA, oneGPU, []float64{100, 140}, []float64{0, 100}, 1, 0},
		// Packing shares at once: job 0 did 10 steps alone; together each
		// runs at 0.6 step/s, so job 1 ends at 10 + 50/0.6 = 93.3 s, when
		// job 0 has 100 - 10 - 50 = 40 steps left, alone: 133.3 s.
		{"packing shares", "packing", twoA, oneGPU, []float64{10 + 50/0.6 + 40, 50 / 0.6}, []float64{0, 10}, 1, 0},
		// SJF-BSBF pairs too: waiting costs 90 + 140 = 230 s of summed
		// completion, pairing 83.3 + 83.3 + 40 = 206.7 s.
		{"sjf-bsbf pairs when it pays", "sjf-bsbf", twoA, oneGPU, []float64{10 + 50/0.6 + 40, 50 / 0.6}, []float64{0, 10}, 1, 0},
		// At 0.4 each pairing loses (290 s > 230 s): in turn.
		{"sjf-bsbf waits when pairing loses", "sjf-bsbf", twoC, oneGPU, []float64{100, 140}, []float64{0, 100}, 1, 0},
		// Two GPUs: gpushare gives each job a GPU of its own.
		{"gpushare free GPUs first", "gpushare", twoA, Cluster{Name: "1x2", Nodes: 1, GPUsPerNode: 2}, []float64{100, 50}, []float64{0, 10}, 150.0 / 200, 0},
		// A and C cannot share (Gavel measured 0): packing runs them in turn.
		{"packing respects memory", "packing", []Job{{Type: "A", Steps: 100, Scale: 1}, {Type: "C", Steps: 50, Arrival: 10, Scale: 1}}, oneGPU,
			[]float64{100, 140}, []float64{0, 100}, 1, 0},
		// A 2-GPU job at 1.5 step/s: 300 steps take 200 s; a 4-GPU job
		// never fits two GPUs.
		{"multi-GPU", "exclusive", []Job{{Type: "A", Steps: 300, Scale: 2}, {Type: "A", Steps: 1, Scale: 4}}, Cluster{Name: "1x2", Nodes: 1, GPUsPerNode: 2},
			[]float64{200}, []float64{0}, 1, 1},
		// Across two servers the unconsolidated 1.2 step/s applies: 250 s.
		{"multi-GPU across servers", "exclusive", []Job{{Type: "A", Steps: 300, Scale: 2}}, Cluster{Name: "2x1", Nodes: 2, GPUsPerNode: 1},
			[]float64{250}, []float64{0}, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, util, err := Simulate(c.policy, c.jobs, c.cluster, thr, Options{})
			must.NoError(t, err)
			var jct, start []float64
			unplaced := 0
			for _, o := range out {
				if !o.Placed {
					unplaced++
					continue
				}
				jct = append(jct, o.JCT())
				start = append(start, o.Start)
			}
			must.SliceLen(t, len(c.jct), jct)
			for i := range jct {
				must.InDelta(t, c.jct[i], jct[i], 1e-6)
				must.InDelta(t, c.start[i], start[i], 1e-6)
			}
			must.InDelta(t, c.util, util, 1e-9)
			must.EqOp(t, c.unplaced, unplaced)
		})
	}
}

func TestSummarise(t *testing.T) {
	out := []Outcome{
		{Job: Job{Arrival: 0}, Start: 0, Finish: 3600, Placed: true},
		{Job: Job{Arrival: 3600}, Start: 7200, Finish: 4 * 3600, Placed: true, SharedFor: 1},
		{Job: Job{Arrival: 0}},
	}
	m := Summarise("t", "c", "p", out, 0.5)
	must.EqOp(t, 1, m.Unplaced)
	must.Eq(t, 2.0, m.AvgJCT) // (1 + 3) / 2 h
	must.Eq(t, 3.0, m.P99JCT)
	must.Eq(t, 0.5, m.AvgQueue)
	must.Eq(t, 4.0, m.Makespan)
	must.Eq(t, 50.0, m.Util)
	must.EqOp(t, 1, m.Shared)
}

// TestUtilisationFromFirstArrival: one job of 100 s arriving at 50 s on
// one GPU keeps it busy for the whole makespan.
func TestUtilisationFromFirstArrival(t *testing.T) {
	out, util, err := Simulate("exclusive", []Job{{Type: "A", Steps: 100, Arrival: 50, Scale: 1}}, oneGPU, tinyThroughputs(t), Options{})
	must.NoError(t, err)
	must.Eq(t, 150.0, out[0].Finish)
	must.Eq(t, 1.0, util)
}

func TestRunCancelledAndBadInput(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cfg := Config{Data: Embedded(), Traces: []string{"925e2b"}, Clusters: []Cluster{Clusters["pcie"]}, Policies: Policies}
	_, err := Run(ctx, cfg)
	must.ErrorIs(t, err, context.Canceled)
	cfg.Traces = []string{"nope"}
	_, err = Run(t.Context(), cfg)
	must.ErrorContains(t, err, "known: ")
	_, err = ParseCluster("pcie:0")
	must.Error(t, err)
	c, err := ParseCluster("dgx1:3")
	must.NoError(t, err)
	must.EqOp(t, 24, c.GPUs())
}
