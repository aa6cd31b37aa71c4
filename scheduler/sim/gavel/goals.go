package gavel

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// JSON is the machine-readable result of a run.
type JSON struct {
	GPU        string       `json:"gpu"`
	Metrics    []Metrics    `json:"metrics"`
	Goals      []Goal       `json:"goals,omitempty"`
	Conditions []Condition  `json:"conditions,omitempty"`
	Elastic    []ElasticRun `json:"elastic,omitempty"`
	Timesliced []Metrics    `json:"timesliced,omitempty"`
}

// JSON returns the result for --json.
func (r *Report) JSON() JSON {
	return JSON{GPU: r.GPU, Metrics: r.Metrics, Goals: r.Goals(), Conditions: r.Conditions, Elastic: r.Elastic, Timesliced: r.Timesliced}
}

// Goal checks gpushare against its goal on one trace and cluster: the
// lowest average JCT of the baselines run (gpushare's own ablations,
// "gpushare-*", are variants of it, not competitors), and a p99 JCT no
// worse than exclusive's. Both are compared at full precision (to
// sameTime), not as rounded in the tables.
type Goal struct {
	Trace   string  `json:"trace"`
	Cluster string  `json:"cluster"`
	AvgJCT  float64 `json:"gpushare_avg_jct_h"`
	// Runner is the baseline with the lowest average JCT, and
	// RunnerAvgJCT that average.
	Runner       string  `json:"runner_up"`
	RunnerAvgJCT float64 `json:"runner_up_avg_jct_h"`
	P99JCT       float64 `json:"gpushare_p99_jct_h"`
	// ExclusiveP99JCT is NaN (null) when exclusive did not run.
	ExclusiveP99JCT report.Num `json:"exclusive_p99_jct_h"`
	LowestAvg       bool       `json:"lowest_avg_jct"`
	P99NoWorse      bool       `json:"p99_no_worse_than_exclusive"`
}

// sameTime is how close two times in hours must be to count as equal: the
// same job finishing at the same instant in two runs can differ by float
// rounding in the last bits.
const sameTime = 1e-9

// Goals checks gpushare on every trace and cluster where it and at least
// one baseline ran, in report order.
func (r *Report) Goals() []Goal {
	var out []Goal
	for _, ms := range r.byRun() {
		var g *Metrics
		var others []Metrics
		for i, m := range ms {
			switch {
			case m.Policy == "gpushare":
				g = &ms[i]
			case !strings.HasPrefix(m.Policy, "gpushare-"):
				others = append(others, m)
			}
		}
		if g == nil || len(others) == 0 {
			continue
		}
		goal := Goal{Trace: g.Trace, Cluster: g.Cluster, AvgJCT: g.AvgJCT, P99JCT: g.P99JCT, ExclusiveP99JCT: report.Num(math.NaN())}
		for i, m := range others {
			if i == 0 || m.AvgJCT < goal.RunnerAvgJCT {
				goal.Runner, goal.RunnerAvgJCT = m.Policy, m.AvgJCT
			}
			if m.Policy == "exclusive" {
				goal.ExclusiveP99JCT = report.Num(m.P99JCT)
			}
		}
		goal.LowestAvg = g.AvgJCT <= goal.RunnerAvgJCT+sameTime
		goal.P99NoWorse = g.P99JCT <= float64(goal.ExclusiveP99JCT)+sameTime // false when NaN
		out = append(out, goal)
	}
	return out
}

// GoalsTable lists the goal checks with a closing count.
func GoalsTable(gs []Goal) report.Table {
	t := report.Table{Header: []string{"trace", "cluster", "gpushare avg JCT (h)", "lowest baseline (h)", "gpushare - lowest baseline (h)", "lowest avg",
		"gpushare p99 (h)", "exclusive p99 (h)", "p99 <= exclusive"}}
	lowest, p99 := 0, 0
	for _, g := range gs {
		t.Rows = append(t.Rows, []string{g.Trace, g.Cluster, fmt.Sprintf("%.3f", g.AvgJCT), fmt.Sprintf("%.3f (%s)", g.RunnerAvgJCT, g.Runner),
			fmt.Sprintf("%+.3f", g.AvgJCT-g.RunnerAvgJCT), yesNo(g.LowestAvg), report.F1(g.P99JCT), report.F1(g.ExclusiveP99JCT), yesNo(g.P99NoWorse)})
		if g.LowestAvg {
			lowest++
		}
		if g.P99NoWorse {
			p99++
		}
	}
	t.Rows = append(t.Rows, []string{"all", "", "", "", "", fmt.Sprintf("%d/%d", lowest, len(gs)), "", "", fmt.Sprintf("%d/%d", p99, len(gs))})
	return t
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
