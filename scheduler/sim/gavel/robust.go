package gavel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// StandardConditions are the perturbed runs `make results` reports beside
// the exact one: a model too optimistic and too pessimistic by 0.15, a
// model with noise of 0.2 standard deviation per pair, declared run times
// off by a log-normal factor of sigma 1, and none declared at all.
var StandardConditions = []Robustness{
	{Name: "model +0.15 (optimistic)", Bias: 0.15},
	{Name: "model -0.15 (pessimistic)", Bias: -0.15},
	{Name: "model noise sd 0.2", Noise: 0.2, Seed: 1},
	{Name: "run times off, log-normal sigma 1", RuntimeSigma: 1, Seed: 1},
	{Name: "no run times declared", NoRuntimes: true},
}

// StandardConditionsSeeded is StandardConditions with the model noise and
// the run-time errors drawn from seed (`-robustness-seed`); a seed other
// than 1 is named in those conditions, so that two seeds' reports are
// told apart.
func StandardConditionsSeeded(seed uint64) []Robustness {
	out := slices.Clone(StandardConditions)
	for i := range out {
		if out[i].Noise > 0 || out[i].RuntimeSigma > 0 {
			out[i].Seed = seed
			if seed != 1 {
				out[i].Name += fmt.Sprintf(", seed %d", seed)
			}
		}
	}
	return out
}

// Condition is the result of one perturbed run: the policies it changes,
// run again, with the goals against the baselines of the same condition.
type Condition struct {
	Robustness Robustness `json:"condition"`
	Metrics    []Metrics  `json:"metrics"`
	Goals      []Goal     `json:"goals"`
}

// affects reports whether a condition changes what policy believes:
// gpushare uses the model and the run times, sjf-bsbf the run times; the
// others use neither. (gpushare-fifo, an ablation, is not run again.)
func affects(rb Robustness, policy string) bool {
	switch policy {
	case "gpushare":
		return true
	case "sjf-bsbf":
		return rb.RuntimeSigma > 0 || rb.NoRuntimes
	}
	return false
}

// conditionGoals checks gpushare of one condition against the baselines:
// those the condition changes as run under it, the others as run exactly.
func conditionGoals(exact, perturbed []Metrics) []Goal {
	type key struct{ trace, cluster, policy string }
	redone := map[key]bool{}
	for _, m := range perturbed {
		redone[key{m.Trace, m.Cluster, m.Policy}] = true
	}
	var all []Metrics
	for _, m := range exact {
		if !redone[key{m.Trace, m.Cluster, m.Policy}] {
			all = append(all, m)
		}
	}
	all = append(all, perturbed...)
	// in the exact run's order of traces and clusters
	sorted := make([]Metrics, 0, len(all))
	for _, ms := range groupBy(all, func(m Metrics) [2]string { return [2]string{m.Trace, m.Cluster} }) {
		sorted = append(sorted, ms...)
	}
	return (&Report{Metrics: sorted}).Goals()
}

// RobustnessTable counts the goals per condition, the exact run first.
func (r *Report) RobustnessTable() report.Table {
	t := report.Table{Header: []string{"condition", "lowest avg JCT", "p99 <= exclusive", "both", "gpushare mean avg JCT (h)", "sjf-bsbf mean avg JCT (h)", "unpairings"}}
	row := func(name string, gs []Goal, ms []Metrics, base []Metrics) {
		lowest, p99, both := 0, 0, 0
		for _, g := range gs {
			lowest += b2i(g.LowestAvg)
			p99 += b2i(g.P99NoWorse)
			both += b2i(g.LowestAvg && g.P99NoWorse)
		}
		gm, moves := meanAvg(ms, "gpushare")
		sm, _ := meanAvg(ms, "sjf-bsbf")
		if sm == "" {
			sm, _ = meanAvg(base, "sjf-bsbf")
		}
		n := len(gs)
		t.Rows = append(t.Rows, []string{name, fmt.Sprintf("%d/%d", lowest, n), fmt.Sprintf("%d/%d", p99, n), fmt.Sprintf("%d/%d", both, n), gm, sm, fmt.Sprint(moves)})
	}
	row("exact", r.Goals(), r.Metrics, r.Metrics)
	for _, c := range r.Conditions {
		row(c.Robustness.Name, c.Goals, c.Metrics, r.Metrics)
	}
	return t
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// meanAvg is the mean average JCT of a policy's runs and its unpairings.
func meanAvg(ms []Metrics, policy string) (string, int) {
	sum, n, moves := 0.0, 0, 0
	for _, m := range ms {
		if m.Policy == policy {
			sum += m.AvgJCT
			moves += m.Moves
			n++
		}
	}
	if n == 0 {
		return "", 0
	}
	return fmt.Sprintf("%.1f", sum/float64(n)), moves
}

// robustnessBars charts, per condition, in how many runs gpushare met each
// goal and both, against the goal of 20 of 22 (scaled to the runs).
func (r *Report) robustnessBars() report.Bars {
	b := report.Bars{Title: "Gavel: runs where gpushare meets its goals, per condition", YLabel: "runs",
		Series: []report.BarSeries{{Name: "lowest avg JCT"}, {Name: "p99 <= exclusive"}, {Name: "both"}}}
	add := func(name string, gs []Goal) {
		b.Categories = append(b.Categories, name)
		var lowest, p99, both float64
		for _, g := range gs {
			lowest += float64(b2i(g.LowestAvg))
			p99 += float64(b2i(g.P99NoWorse))
			both += float64(b2i(g.LowestAvg && g.P99NoWorse))
		}
		for i, v := range []float64{lowest, p99, both} {
			b.Series[i].Values = append(b.Series[i].Values, v)
		}
		b.RefY = float64(len(gs)) * 20 / 22
	}
	add("exact", r.Goals())
	for _, c := range r.Conditions {
		add(c.Robustness.Name, c.Goals)
	}
	return b
}

// robustnessMarkdown is the section of gavel.md on the perturbed runs,
// with its chart saved as chart (a file name in the same directory).
func (r *Report) robustnessMarkdown(chart string) string {
	if len(r.Conditions) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Robustness: when the model or the run times are wrong\n\n")
	b.WriteString("The simulated cluster always runs at Gavel's measured throughputs; only what the policies believe is perturbed. " +
		"A perturbed model shifts every predicted normalised throughput of a pair (bias) or adds an error fixed per pair (noise); " +
		"perturbed run times change what gpushare and sjf-bsbf are told (exclusive, hived and packing use neither and are not run again). " +
		"gpushare starts from the model with its cross-validated error as uncertainty and learns from the pairs it observes.\n\n")
	b.WriteString(r.RobustnessTable().Markdown() + "\n")
	fmt.Fprintf(&b, "![runs meeting the goals per condition; the dashed line is the goal of 20 of 22](%s)\n\n", chart)
	for _, c := range r.Conditions {
		fmt.Fprintf(&b, "### %s\n\n%s\n", c.Robustness.Name, GoalsTable(c.Goals).Markdown())
	}
	return b.String()
}
