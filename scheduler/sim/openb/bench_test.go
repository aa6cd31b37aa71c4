package openb

import (
	"context"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// BenchmarkShort is the short openb run for `make bench`: the three traces,
// one seed (42), the validated baselines and gpushare. It reports each policy's allocation ratio at
// 130% arrived demand per trace (the published 10-seed means on default:
// random 87.47, best-fit 93.08, gpu-packing 92.00, FGD 95.39) and gpushare's
// lead over fgd in points, and the offline packer, the upper bound and
// gpushare's share of the gap fgd leaves to the offline packer.
//
//	go test -run '^$' -bench Short -benchtime 1x ./scheduler/sim/...
func BenchmarkShort(b *testing.B) {
	for range b.N {
		rep, err := Run(context.Background(), Config{Data: Embedded(), Traces: Traces, Policies: append(slices.Clone(Baselines), placement.PolicyGpushare),
			Seeds: []int64{42}, Workers: 2, Limits: true})
		if err != nil {
			b.Fatal(err)
		}
		sums := rep.Summaries()
		for _, s := range sums {
			b.ReportMetric(float64(s.Alloc130), s.Trace+"/"+s.Policy+"-alloc%@130")
			if s.Policy == "gpushare" {
				b.ReportMetric(float64(s.BestCellShare), s.Trace+"/gpushare-best-cell%")
			}
		}
		// against the baseline run in the same process: fgd on the same seed
		for _, imp := range rep.VsFGD(sums) {
			b.ReportMetric(float64(imp.Gpushare-imp.FGDOurs), imp.Trace+"/gpushare-minus-fgd-pp@130")
		}
		// how close to the limit: the offline packer, the bound and
		// gpushare's share of the gap fgd leaves to the offline packer
		for _, l := range rep.LimitSummaries(sums) {
			if l.Demand == MaxDemand {
				b.ReportMetric(float64(l.Offline), l.Trace+"/offline-alloc%@130")
				b.ReportMetric(float64(l.Bound), l.Trace+"/bound-alloc%@130")
				b.ReportMetric(float64(l.GapShare), l.Trace+"/gpushare-gap-share%@130")
			}
		}
	}
}
