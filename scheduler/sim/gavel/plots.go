package gavel

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// relativeBars charts each policy's average JCT as a ratio to exclusive's,
// one chart per cluster with a group of bars per trace (below 1: faster
// than exclusive), keyed by cluster in report order. It returns nothing
// when exclusive did not run with another policy.
func (r *Report) relativeBars() []clusterBars {
	var clusters []string
	byCluster := map[string][][]Metrics{}
	for _, ms := range r.byRun() {
		c := ms[0].Cluster
		if _, ok := byCluster[c]; !ok {
			clusters = append(clusters, c)
		}
		byCluster[c] = append(byCluster[c], ms)
	}
	var out []clusterBars
	for _, c := range clusters {
		b := report.Bars{Title: fmt.Sprintf("Gavel on %s: average JCT relative to exclusive", c), YLabel: "average JCT / exclusive's", RefY: 1}
		col := map[string]int{} // policy -> series
		for _, ms := range byCluster[c] {
			i := slices.IndexFunc(ms, func(m Metrics) bool { return m.Policy == "exclusive" })
			if i < 0 || ms[i].AvgJCT <= 0 {
				continue
			}
			base := ms[i].AvgJCT
			b.Categories = append(b.Categories, ms[0].Trace)
			for _, m := range ms {
				if m.Policy == "exclusive" {
					continue
				}
				k, ok := col[m.Policy]
				if !ok {
					k = len(b.Series)
					col[m.Policy] = k
					b.Series = append(b.Series, report.BarSeries{Name: m.Policy, Values: nanSlice(len(b.Categories) - 1)})
				}
				b.Series[k].Values = append(b.Series[k].Values, m.AvgJCT/base)
			}
			for k := range b.Series { // a policy missing from this trace
				if len(b.Series[k].Values) < len(b.Categories) {
					b.Series[k].Values = append(b.Series[k].Values, math.NaN())
				}
			}
		}
		if len(b.Series) > 0 {
			out = append(out, clusterBars{c, b})
		}
	}
	return out
}

type clusterBars struct {
	cluster string
	bars    report.Bars
}

// fileSafe turns a cluster name such as "pcie:2" into "pcie-2" for file names.
func fileSafe(cluster string) string { return strings.ReplaceAll(cluster, ":", "-") }

func nanSlice(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}
