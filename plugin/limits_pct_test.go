package plugin

import (
	"strconv"
	"testing"

	"github.com/shoenig/test/must"
)

// The library refuses a limits file whose compute_pct is not 1-100 (0
// would pace every launch for ever, issue 29 defect 9b): the plugin never
// writes one.
func TestLimitsFileComputePctInRange(t *testing.T) {
	for _, c := range []struct{ pct, want int }{{0, 1}, {-5, 1}, {1, 1}, {25, 25}, {100, 100}, {250, 100}} {
		f := string(interposerLimits{memoryBytes: 1 << 30, computePct: c.pct}.file())
		must.StrContains(t, f, "\ncompute_pct="+strconv.Itoa(c.want)+"\n")
	}
}
