package interposer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// A task whose kernels grow tenfold (1 ms to 10 ms: prefill after decode)
// is held to its 25% cap across the step (issue 44, 12), on the fake GPU
// and the simulated clock: 3 s of 1 ms kernels, then four windows of 0.8 s
// (20 kernels each at 25%) of 10 ms ones, each within 1.5 points of the
// cap, and so their sum. Before, only one launch in four was measured and
// the others were charged the mean, which followed the samples slowly
// (1/8 each): the windows ran at 33.75, 26.25, 25.00 and 25.00%, 27.50%
// over the four.
func TestPacingFollowsAKernelLengthStep(t *testing.T) {
	b := build(t)
	ws := kernelStep(t, b, "plain")
	var busy, wall float64
	var shares []string
	for _, w := range ws {
		busy += w.busy
		wall += w.wall
		shares = append(shares, fmt.Sprintf("%.2f", w.share()))
	}
	overall := 100 * busy / wall
	t.Logf("25%% cap, 1 ms then 10 ms kernels: windows of 0.8 s after the step %s%%, %.2f%% over 3.2 s", strings.Join(shares, ", "), overall)
	for _, w := range ws {
		must.Between(t, 23.5, w.share(), 26.5)
	}
	must.Between(t, 23.5, overall, 26.5)
}

// kernelStep runs one process at 25% through the step and returns its
// windows after it.
func kernelStep(t *testing.T, b *binaries, via string) []window {
	r := run{limits: reservation(t, "compute_pct=25\n"), program: b.kdirect, mode: "direct", env: gpuEnv(t)}
	args := []string{"via:" + via, "kern:1000", "run:3000:0:3000", "kern:10000"}
	for range 4 {
		args = append(args, "run:800:0:800")
	}
	got := r.output(t, b, args...)
	var ws []window
	for _, l := range got {
		if strings.HasPrefix(l, "run ") {
			ws = append(ws, parseWindow(t, l))
		}
	}
	must.SliceLen(t, 5, ws)
	return ws[1:]
}

// A paced launch's own driver calls (besides the launch): a capture check,
// one cuCtxGetCurrent, and for the one launch in four measured two event
// records, a query, an elapsed time and the capture mode made relaxed and
// back around the query (issue 44, 12: before, 4.5 per launch, two
// cuCtxGetCurrent among them). Counted by the fake driver over 400
// launches at 25%, each waited for, after 20 to warm up.
func TestPacedLaunchDriverCalls(t *testing.T) {
	b := build(t)
	r := run{limits: reservation(t, "compute_pct=25\n"), program: b.kdirect, mode: "direct", env: gpuEnv(t)}
	args := []string{"kern:100"}
	args = append(args, slices.Repeat([]string{"launch:1"}, 20)...)
	args = append(args, "calls")
	args = append(args, slices.Repeat([]string{"launch:1"}, 400)...)
	args = append(args, "calls")
	got := r.output(t, b, args...)
	var calls []uint64
	for _, l := range got {
		if n, ok := strings.CutPrefix(l, "calls 0 "); ok {
			v, err := strconv.ParseUint(n, 10, 64)
			must.NoError(t, err)
			calls = append(calls, v)
		} else if l != "kern 0" {
			must.Eq(t, "launch 0", l)
		}
	}
	must.SliceLen(t, 2, calls)
	per := float64(calls[1]-calls[0]) / 400
	t.Logf("driver calls per paced launch: %.3f", per)
	must.Less(t, 4, per)
}
