package gavel

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/shoenig/test/must"
)

func TestGoals(t *testing.T) {
	r := &Report{Metrics: []Metrics{
		{Trace: "a", Cluster: "pcie", Policy: "exclusive", AvgJCT: 10, P99JCT: 50},
		{Trace: "a", Cluster: "pcie", Policy: "sjf-bsbf", AvgJCT: 8.001, P99JCT: 70},
		{Trace: "a", Cluster: "pcie", Policy: "gpushare", AvgJCT: 8.002, P99JCT: 50},
		{Trace: "a", Cluster: "pcie", Policy: "gpushare-gain", AvgJCT: 7, P99JCT: 40}, // an ablation, not a baseline
		{Trace: "b", Cluster: "dgx1", Policy: "exclusive", AvgJCT: 10, P99JCT: 40},
		{Trace: "b", Cluster: "dgx1", Policy: "gpushare", AvgJCT: 9, P99JCT: 40.5},
		{Trace: "c", Cluster: "dgx1", Policy: "sjf-bsbf", AvgJCT: 9, P99JCT: 40},
		{Trace: "c", Cluster: "dgx1", Policy: "gpushare", AvgJCT: 9, P99JCT: 30},
		{Trace: "d", Cluster: "dgx1", Policy: "gpushare", AvgJCT: 9, P99JCT: 30}, // with its ablation only: no goal
		{Trace: "d", Cluster: "dgx1", Policy: "gpushare-fifo", AvgJCT: 9, P99JCT: 30},
	}}
	gs := r.Goals()
	must.SliceLen(t, 3, gs)
	// 8.002 against 8.001: a miss, though both print as 8.0 in the tables.
	must.Eq(t, Goal{Trace: "a", Cluster: "pcie", AvgJCT: 8.002, Runner: "sjf-bsbf", RunnerAvgJCT: 8.001, P99JCT: 50, ExclusiveP99JCT: 50,
		LowestAvg: false, P99NoWorse: true}, gs[0])
	must.True(t, gs[1].LowestAvg)
	must.False(t, gs[1].P99NoWorse)
	// A tie is the lowest; without exclusive the p99 goal cannot be met.
	must.True(t, gs[2].LowestAvg)
	must.False(t, gs[2].P99NoWorse)
	must.True(t, math.IsNaN(float64(gs[2].ExclusiveP99JCT)))
	b, err := json.Marshal(r.JSON())
	must.NoError(t, err)
	must.StrContains(t, string(b), `"exclusive_p99_jct_h":null`)

	tab := GoalsTable(gs)
	must.Eq(t, []string{"all", "", "", "", "", "2/3", "", "", "1/3"}, tab.Rows[len(tab.Rows)-1])
	must.Eq(t, "+0.001", tab.Rows[0][4])
}

func TestRelativeBars(t *testing.T) {
	r := &Report{Metrics: []Metrics{
		{Trace: "a", Cluster: "pcie", Policy: "exclusive", AvgJCT: 10},
		{Trace: "a", Cluster: "pcie", Policy: "gpushare", AvgJCT: 5},
		{Trace: "b", Cluster: "pcie", Policy: "exclusive", AvgJCT: 4},
		{Trace: "b", Cluster: "pcie", Policy: "packing", AvgJCT: 6},
		{Trace: "b", Cluster: "pcie", Policy: "gpushare", AvgJCT: 2},
		{Trace: "a", Cluster: "dgx1:2", Policy: "gpushare", AvgJCT: 5}, // no exclusive: no chart
	}}
	bs := r.relativeBars()
	must.SliceLen(t, 1, bs)
	must.EqOp(t, "pcie", bs[0].cluster)
	b := bs[0].bars
	must.Eq(t, []string{"a", "b"}, b.Categories)
	must.SliceLen(t, 2, b.Series)
	must.EqOp(t, "gpushare", b.Series[0].Name)
	must.Eq(t, []float64{0.5, 0.5}, b.Series[0].Values)
	must.EqOp(t, "packing", b.Series[1].Name) // first seen on trace b
	must.True(t, math.IsNaN(b.Series[1].Values[0]))
	must.EqOp(t, 1.5, b.Series[1].Values[1])
	must.EqOp(t, "dgx1-2", fileSafe("dgx1:2"))
}
