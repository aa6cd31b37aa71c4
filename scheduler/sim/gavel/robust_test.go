package gavel

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/shoenig/test/must"
)

// A biased model predicts every pair's throughputs shifted, clamped to
// (0, 1]; noise is fixed per pair and seed; a job alone is never perturbed.
func TestPerturbedModel(t *testing.T) {
	m := interference.Default()
	a, _ := m.Lookup("A3C")
	b, _ := m.Lookup("LM (batch size 10)")
	pair := []interference.Profile{a, b}
	want := m.Predict(pair)
	got := make([]float64, 2)
	perturbed{m: m, bias: 0.15}.PredictInto(got, pair)
	for i := range got {
		must.InDelta(t, min(want[i]+0.15, 1), got[i], 1e-12)
	}
	perturbed{m: m, bias: -2}.PredictInto(got, pair)
	must.Eq(t, []float64{0.01, 0.01}, got)
	n1, n2 := make([]float64, 2), make([]float64, 2)
	perturbed{m: m, noise: 0.2, seed: 7}.PredictInto(n1, pair)
	perturbed{m: m, noise: 0.2, seed: 7}.PredictInto(n2, pair)
	must.Eq(t, n1, n2)
	must.NotEq(t, want, n1)
	alone := []float64{0}
	perturbed{m: m, bias: -0.5}.PredictInto(alone, pair[:1])
	must.Eq(t, 1.0, alone[0])
}

// Declared run times: exact, off by a log-normal factor fixed per job and
// seed (median 1), or none at all.
func TestDeclaredRunTimes(t *testing.T) {
	s := &sim{thr: tinyThroughputs(t), cluster: oneGPU}
	j := Job{ID: 3, Type: "A", Steps: 100, Scale: 1}
	must.Eq(t, s.expected(j), s.declared(j))
	s.opts.Robustness = Robustness{RuntimeSigma: 1, Seed: 1}
	d := s.declared(j)
	must.NotEq(t, s.expected(j), d)
	must.Eq(t, d, s.declared(j))
	var logs float64
	for id := range 2000 {
		logs += math.Log(s.declared(Job{ID: id, Type: "A", Steps: 100, Scale: 1}) / 100)
	}
	must.Between(t, -0.1, logs/2000, 0.1)
	s.opts.Robustness = Robustness{NoRuntimes: true}
	must.Eq(t, 0.0, s.declared(j))
	must.Eq(t, defaultExpected.Seconds(), s.sjfTime(j))
}

// A condition runs again only the policies it affects, and its goals
// compare gpushare with the baselines of the same condition.
func TestConditions(t *testing.T) {
	cfg := Config{Data: Embedded(), Traces: []string{"2869ce"}, Clusters: []Cluster{{Name: "pcie:4", Nodes: 4, GPUsPerNode: 4}},
		Policies: []string{"exclusive", "sjf-bsbf", "gpushare"}, Workers: 2,
		Conditions: []Robustness{{Name: "biased", Bias: 0.15}, {Name: "no run times", NoRuntimes: true}}}
	rep, err := Run(context.Background(), cfg)
	must.NoError(t, err)
	must.SliceLen(t, 3, rep.Metrics)
	must.SliceLen(t, 2, rep.Conditions)
	policies := func(ms []Metrics) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Policy)
		}
		return out
	}
	must.Eq(t, []string{"gpushare"}, policies(rep.Conditions[0].Metrics))
	must.Eq(t, []string{"sjf-bsbf", "gpushare"}, policies(rep.Conditions[1].Metrics))
	g := rep.Conditions[1].Goals
	must.SliceLen(t, 1, g)
	must.Eq(t, rep.Conditions[1].Metrics[1].AvgJCT, g[0].AvgJCT)
	sjf := rep.Conditions[1].Metrics[0].AvgJCT
	if sjf < rep.Metrics[0].AvgJCT {
		must.Eq(t, sjf, g[0].RunnerAvgJCT)
	}
	tbl := rep.RobustnessTable()
	must.SliceLen(t, 3, tbl.Rows)
	must.Eq(t, "exact", tbl.Rows[0][0])
	must.Eq(t, "no run times", tbl.Rows[2][0])
	b := rep.robustnessBars()
	must.Eq(t, []string{"exact", "biased", "no run times"}, b.Categories)
	must.Eq(t, 20.0/22, b.RefY)

	dir := t.TempDir()
	must.NoError(t, rep.WriteDir(dir, "svg"))
	md, err := os.ReadFile(filepath.Join(dir, "gavel.md"))
	must.NoError(t, err)
	must.StrContains(t, string(md), "## Robustness")
	must.StrContains(t, string(md), "gavel_robustness.svg")
	for _, f := range []string{"gavel_robustness.csv", "gavel_robustness.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		must.NoError(t, err)
	}
}

// What sharing has cost a running job is a share of its declared run
// time, as the service charges it: the true one when run times are
// exact, the one declared when they are off, and none (not bounded) when
// no run time is declared or the policy declares none (gpushare-fifo).
func TestStretchedIsAShareOfTheDeclaredRunTime(t *testing.T) {
	s := &sim{thr: tinyThroughputs(t), cluster: oneGPU, spec: specs["gpushare"]}
	j := Job{ID: 3, Type: "A", Steps: 100, Scale: 1}
	s.run = map[int]*running{3: {job: j, allocs: []string{"a"}, out: &Outcome{SharedLoss: 10}}}
	must.Eq(t, map[string]float64{"a": 10 / s.expected(j)}, s.stretched())
	s.opts.Robustness = Robustness{RuntimeSigma: 1, Seed: 1}
	must.Eq(t, map[string]float64{"a": 10 / s.declared(j)}, s.stretched())
	must.NotEq(t, s.expected(j), s.declared(j))
	s.opts.Robustness = Robustness{NoRuntimes: true}
	must.MapEmpty(t, s.stretched())
	s.opts.Robustness = Robustness{}
	s.spec = specs["gpushare-fifo"]
	must.MapEmpty(t, s.stretched())
}

// With run times declared wrong, the step is told when running jobs end as
// the service knows it (queue.Left): from the declared run time, the time
// a job ran and what sharing cost it, not from the work it has left, which
// only the simulator knows. With exact run times that is the truth.
func TestBelievedLeftIsWhatTheServiceKnows(t *testing.T) {
	s := &sim{thr: tinyThroughputs(t), cluster: oneGPU, spec: specs["gpushare"], now: 50}
	j := Job{ID: 3, Type: "A", Steps: 100, Scale: 1}
	iso, _ := s.thr.Isolated("A", 1, true)
	r := &running{job: j, rem: 30, startRem: 100, iso: iso, rate: iso / 2, out: &Outcome{SharedLoss: 10}}
	must.Eq(t, 30/(iso/2), s.believedLeft(r), must.Sprint("exact: the truth"))

	for _, seed := range []uint64{1, 2, 3} {
		s.opts.Robustness = Robustness{RuntimeSigma: 1, Seed: seed}
		d := s.declared(j)
		want := queue.Left(queue.Seconds(d), 50*time.Second, 10*time.Second, 0.5).Seconds()
		must.EqOp(t, want, s.believedLeft(r))
		r.rem = 90 // the work left is not what the service sees
		must.EqOp(t, want, s.believedLeft(r))
		r.rem = 30
	}
	// restarted with 40 steps left, having lost 4 s to sharing before
	s.opts.Robustness = Robustness{RuntimeSigma: 1, Seed: 1}
	r.started, r.startRem, r.lossAtStart = 20, 40, 4
	d := s.declared(j)
	must.EqOp(t, queue.Left(queue.Seconds(d*0.4), 30*time.Second, 6*time.Second, 0.5).Seconds(), s.believedLeft(r))
}
