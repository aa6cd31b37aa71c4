package openb

import (
	"math"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// Tolerance is how far (percentage points) a baseline's mean may be from
// the published mean.
const Tolerance = 1.0

// Check is one comparison of our mean with the published mean.
type Check struct {
	Trace     string     `json:"trace"`
	Policy    string     `json:"policy"`
	Demand    int        `json:"arrived_demand"`
	Ours      report.Num `json:"ours"`
	Published report.Num `json:"published"`
	Diff      report.Num `json:"diff"`
	Seeds     int        `json:"seeds"`
	OK        bool       `json:"ok"`
}

// ValidationBins are the arrived demands compared.
var ValidationBins = []int{100, MaxDemand}

// Validate compares every baseline (policies with a published FGD
// counterpart) at 100% and 130% arrived demand.
func Validate(sums []Summary, pub Published) []Check {
	var out []Check
	for _, s := range sums {
		name, ok := FGDName[s.Policy]
		if !ok {
			continue
		}
		for _, b := range ValidationBins {
			p, n := pub.Mean(s.Trace, name, b)
			if n == 0 {
				continue
			}
			c := Check{Trace: s.Trace, Policy: s.Policy, Demand: b, Ours: report.Num(s.Curve[b]), Published: report.Num(p), Seeds: s.Seeds}
			c.Diff = c.Ours - c.Published
			c.OK = math.Abs(float64(c.Diff)) <= Tolerance+1e-9
			out = append(out, c)
		}
	}
	return out
}
