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
	var out []clusterBars
	for _, runs := range groupBy(r.byRun(), func(ms []Metrics) string { return ms[0].Cluster }) {
		c := runs[0][0].Cluster
		b := report.Bars{Title: fmt.Sprintf("Gavel on %s: average JCT relative to exclusive", c), YLabel: "average JCT / exclusive's", RefY: 1}
		exclusive := func(ms []Metrics) int {
			i := slices.IndexFunc(ms, func(m Metrics) bool { return m.Policy == "exclusive" })
			if i >= 0 && ms[i].AvgJCT <= 0 {
				return -1
			}
			return i
		}
		var policies []string // in order of first appearance beside exclusive
		for _, ms := range runs {
			if exclusive(ms) < 0 {
				continue
			}
			for _, m := range ms {
				if m.Policy != "exclusive" && !slices.Contains(policies, m.Policy) {
					policies = append(policies, m.Policy)
				}
			}
		}
		for _, p := range policies {
			b.Series = append(b.Series, report.BarSeries{Name: p})
		}
		for _, ms := range runs {
			i := exclusive(ms)
			if i < 0 {
				continue
			}
			b.Categories = append(b.Categories, ms[0].Trace)
			for k, p := range policies {
				v := math.NaN() // the policy did not run on this trace
				if j := slices.IndexFunc(ms, func(m Metrics) bool { return m.Policy == p }); j >= 0 {
					v = ms[j].AvgJCT / ms[i].AvgJCT
				}
				b.Series[k].Values = append(b.Series[k].Values, v)
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
