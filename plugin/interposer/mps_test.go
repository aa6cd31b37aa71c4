package interposer

import (
	"testing"

	"github.com/shoenig/test/must"
)

// Under sharing = "mps" the plugin writes compute_pct=100 (the MPS daemon's
// active thread percentage limits the SMs: plugin
// TestReserveInterposerMPSNotPacedTwice), and the library then does not
// pace: a process alone takes all the (fake, time-sliced) GPU's time, on
// the simulated clock. Pacing it too, at the file's former compute_pct=25,
// would have left an SM-bound task 25% of its 25% of the SMs; the same
// process under that file is held to 25%.
func TestMPSLimitsNotPaced(t *testing.T) {
	b := build(t)
	for _, c := range []struct {
		name, limits string
		lo, hi       float64
	}{
		{"mps", "memory_bytes=4294967296\ncompute_pct=100\n# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n", 95, 100.01},
		{"paced-twice", "memory_bytes=4294967296\ncompute_pct=25\n", 23, 27},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, _ := runOne(t, b, kernRun{run{limits: reservation(t, c.limits), program: b.kdirect, mode: "direct", env: gpuEnv(t)},
				[]string{"kern:2000", "run:2000:400:2000"}})
			t.Logf("%s: GPU share %.2f%%", c.name, w.share())
			must.Between(t, c.lo, w.share(), c.hi)
		})
	}
}
