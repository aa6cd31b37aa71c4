package gavel

import (
	"context"
	"testing"
)

// BenchmarkShort is the short Gavel run for `make bench`: trace 6c71a0 (2,000
// jobs) on 16 x 4 V100 (PCIe) and 8 x DGX-1, every policy; it reports each
// policy's average and p99 JCT in hours, and gpushare's as ratios to the
// lowest average of the baselines and to exclusive's p99 (below 1:
// gpushare is ahead).
//
//	go test -run '^$' -bench Short -benchtime 1x ./scheduler/sim/...
func BenchmarkShort(b *testing.B) {
	for range b.N {
		rep, err := Run(context.Background(), Config{Data: Embedded(), Traces: []string{"6c71a0"}, Clusters: []Cluster{Clusters["pcie"], Clusters["dgx1"]},
			Policies: Policies, Workers: 2})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range rep.Metrics {
			b.ReportMetric(m.AvgJCT, m.Cluster+"/"+m.Policy+"-avgJCT-h")
			b.ReportMetric(m.P99JCT, m.Cluster+"/"+m.Policy+"-p99JCT-h")
		}
		for _, g := range rep.Goals() {
			b.ReportMetric(g.AvgJCT/g.RunnerAvgJCT, g.Cluster+"/gpushare-avgJCT-x-best-baseline")
			b.ReportMetric(g.P99JCT/float64(g.ExclusiveP99JCT), g.Cluster+"/gpushare-p99JCT-x-exclusive")
		}
	}
}
