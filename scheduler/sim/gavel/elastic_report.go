package gavel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// ElasticRun is one elastic run (one seed of the jobs that opt in): the
// gpushare policies run again with Elastic.
type ElasticRun struct {
	Elastic Elastic   `json:"elastic"`
	Metrics []Metrics `json:"metrics"`
}

// elasticRow is one trace x cluster x policy: the exact run and its
// elastic runs.
type elasticRow struct {
	without Metrics
	with    []Metrics
}

// elasticRows pairs each elastic run with the exact run of the same trace,
// cluster and policy, in report order.
func (r *Report) elasticRows() []elasticRow {
	type key struct{ trace, cluster, policy string }
	at := map[key]int{}
	var rows []elasticRow
	for _, m := range r.Metrics {
		at[key{m.Trace, m.Cluster, m.Policy}] = len(rows)
		rows = append(rows, elasticRow{without: m})
	}
	for _, e := range r.Elastic {
		for _, m := range e.Metrics {
			if i, ok := at[key{m.Trace, m.Cluster, m.Policy}]; ok {
				rows[i].with = append(rows[i].with, m)
			}
		}
	}
	out := rows[:0]
	for _, row := range rows {
		if len(row.with) > 0 {
			out = append(out, row)
		}
	}
	return out
}

// mean is the mean of f over ms.
func mean(ms []Metrics, f func(Metrics) float64) float64 {
	sum := 0.0
	for _, m := range ms {
		sum += f(m)
	}
	return sum / float64(len(ms))
}

// ElasticTable compares each elastic policy run without and with elastic
// groups, the elastic figures the mean over the seeds (the average JCT
// with its lowest and highest), closing with the means over all rows.
func (r *Report) ElasticTable() report.Table {
	t := report.Table{Header: []string{"trace", "cluster", "policy", "seeds", "avg JCT (h)", "elastic avg JCT (h)", "p99 JCT (h)", "elastic p99 (h)",
		"avg queueing (h)", "elastic queueing (h)", "GPU util %", "elastic util %", "elastic jobs", "grows", "shrinks"}}
	var offs, ons [4]float64
	var grows, shrinks float64
	rows := r.elasticRows()
	for _, row := range rows {
		w, e := row.without, row.with
		lo, hi := e[0].AvgJCT, e[0].AvgJCT
		for _, m := range e {
			lo, hi = min(lo, m.AvgJCT), max(hi, m.AvgJCT)
		}
		on := [4]float64{mean(e, func(m Metrics) float64 { return m.AvgJCT }), mean(e, func(m Metrics) float64 { return m.P99JCT }),
			mean(e, func(m Metrics) float64 { return m.AvgQueue }), mean(e, func(m Metrics) float64 { return m.Util })}
		off := [4]float64{w.AvgJCT, w.P99JCT, w.AvgQueue, w.Util}
		g := mean(e, func(m Metrics) float64 { return float64(m.Grows) })
		sh := mean(e, func(m Metrics) float64 { return float64(m.Shrinks) })
		for i := range on {
			offs[i] += off[i]
			ons[i] += on[i]
		}
		grows += g
		shrinks += sh
		t.Rows = append(t.Rows, []string{w.Trace, w.Cluster, w.Policy, strconv.Itoa(len(e)), report.F1(off[0]), fmt.Sprintf("%.1f (%.1f-%.1f)", on[0], lo, hi),
			report.F1(off[1]), report.F1(on[1]), report.F1(off[2]), report.F1(on[2]), report.F1(off[3]), report.F1(on[3]),
			report.F1(mean(e, func(m Metrics) float64 { return float64(m.ElasticJobs) })), report.F1(g), report.F1(sh)})
	}
	if n := float64(len(rows)); n > 1 {
		t.Rows = append(t.Rows, []string{"mean", "", "", "", report.F1(offs[0] / n), report.F1(ons[0] / n), report.F1(offs[1] / n), report.F1(ons[1] / n),
			report.F1(offs[2] / n), report.F1(ons[2] / n), report.F1(offs[3] / n), report.F1(ons[3] / n), "", report.F1(grows / n), report.F1(shrinks / n)})
	}
	return t
}

// ElasticRunsTable lists every elastic run beside its run without (the
// rows of gavel_elastic.csv).
func (r *Report) ElasticRunsTable() report.Table {
	t := report.Table{Header: []string{"trace", "cluster", "policy", "seed", "share", "max_factor", "resize_cost_s", "elastic_jobs", "grows", "shrinks",
		"avg_jct_h", "elastic_avg_jct_h", "p99_jct_h", "elastic_p99_jct_h", "avg_queueing_h", "elastic_avg_queueing_h", "gpu_util", "elastic_gpu_util"}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for _, row := range r.elasticRows() {
		w := row.without
		for i, m := range row.with {
			e := r.elasticOf(m, i)
			t.Rows = append(t.Rows, []string{w.Trace, w.Cluster, w.Policy, strconv.FormatUint(e.Seed, 10), f(e.Share), strconv.Itoa(e.maxFactor()), f(e.resizeCost()),
				strconv.Itoa(m.ElasticJobs), strconv.Itoa(m.Grows), strconv.Itoa(m.Shrinks), f(w.AvgJCT), f(m.AvgJCT), f(w.P99JCT), f(m.P99JCT),
				f(w.AvgQueue), f(m.AvgQueue), f(w.Util), f(m.Util)})
		}
	}
	return t
}

// elasticOf is the settings of the i-th elastic run of m's trace, cluster
// and policy.
func (r *Report) elasticOf(m Metrics, i int) Elastic {
	for _, e := range r.Elastic {
		for _, o := range e.Metrics {
			if o.Trace == m.Trace && o.Cluster == m.Cluster && o.Policy == m.Policy {
				if i == 0 {
					return e.Elastic
				}
				i--
			}
		}
	}
	return Elastic{}
}

// elasticMarkdown is the section of gavel.md on elastic groups.
func (r *Report) elasticMarkdown() string {
	e := r.Elastic[0].Elastic
	seeds := make([]string, len(r.Elastic))
	for i, run := range r.Elastic {
		seeds[i] = strconv.FormatUint(run.Elastic.Seed, 10)
	}
	var b strings.Builder
	b.WriteString("## Elastic groups\n\n")
	fmt.Fprintf(&b, "A share of %.2f of the jobs, drawn per seed (%s), opts in: each runs between the GPUs it asks for and %d times that, "+
		"grows one replica (a whole idle GPU) at a time while that brings its expected end forward by more than the resize's pause (%.0f s of its work), "+
		"and shrinks, newest replicas first, when the decision step, deciding the queue as if grown GPUs were idle, places a waiting job on a grown replica's GPU "+
		"(never below the GPUs it asked for; the replicas that stay never restart). A grown job runs at its measured throughput times S(n)/S(min), S(n) = n / (1 + c (n - 1)), "+
		"c per model family (%s; A3C never grows), doubled across servers. "+
		"Only the gpushare policies grow jobs; the figures without are the exact run's. Elastic columns are means over the seeds (average JCT: lowest-highest); "+
		"grows and shrinks count replicas per run.\n\n", e.Share, strings.Join(seeds, ", "), e.maxFactor(), e.resizeCost(), scalingNote())
	b.WriteString(r.ElasticTable().Markdown() + "\n")
	return b.String()
}
