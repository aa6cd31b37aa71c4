package interposer

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// The launch hook against what the driver enforces (issue 29): stream
// capture, stream waits and contexts, modelled by the fake driver
// (testdata/fakecapture.c), on the simulated clock.

// lines runs one kernprog process, within a liveness bound (never a
// figure: a process that deadlocks is killed), and returns its output's
// lines and stderr.
func lines(t *testing.T, b *binaries, r run, args ...string) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // liveness only
	defer cancel()
	cmd := r.cmd(b, args...)
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...) // the same command, killed at the bound
	c.Env = cmd.Env
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	must.NoError(t, ctx.Err(), must.Sprintf("%v: still running after the liveness bound (a deadlock); stderr: %s", args, stderr.String()))
	must.NoError(t, err, must.Sprintf("%v: %s", args, stderr.String()))
	return strings.Split(strings.TrimSpace(string(out)), "\n"), stderr.String()
}

// A graph captured under a compute cap: cuStreamEndCapture succeeds in
// every capture mode (the hook neither records events into the capture nor
// makes a call the mode prohibits, though another thread launches paced
// kernels meanwhile), and the graph's replays (4 kernels of 1 ms each) are
// paced by what they run. Without a cap the same capture works and the
// replays take the GPU.
func TestGraphCaptureUnderACap(t *testing.T) {
	b := build(t)
	modes := []string{"global", "thread-local", "relaxed"}
	for m, mode := range modes {
		for _, limits := range []string{"compute_pct=25\n", ""} {
			name := mode + "/cap-25"
			if limits == "" {
				name = mode + "/no-cap"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel() // a GPU and a clock each
				r := run{program: b.kdirect, mode: "direct", env: gpuEnv(t)}
				if limits != "" {
					r.limits = reservation(t, limits)
				}
				got, _ := lines(t, b, r, "kern:1000", fmt.Sprintf("capture:%d:4:10", m), "run:3000:500:3000")
				must.SliceLen(t, 3, got)
				must.Eq(t, "capture 0", got[1], must.Sprint("cuStreamEndCapture's result"))
				w := parseWindow(t, got[2])
				t.Logf("%s: graph replays %.2f%% of the GPU, %.0f kernels", name, w.share(), w.kernels)
				must.Positive(t, w.kernels)
				if limits != "" {
					must.Between(t, 23, w.share(), 27)
				} else {
					must.Greater(t, 95, w.share())
				}
			})
		}
	}
}

// A paced launch never waits on the GPU: 100 kernels are launched behind a
// stream wait (cuStreamWaitValue32) whose release another thread writes
// 50 ms later, after a paced launch of its own. A hook that waits for the
// oldest of 64 kernels in flight, holding its lock, never lets that thread
// launch: the program hangs (the liveness bound kills it).
func TestPacedLaunchNeverBlocksOnTheGPU(t *testing.T) {
	b := build(t)
	r := run{limits: reservation(t, "compute_pct=25\n"), program: b.kdirect, mode: "direct", env: gpuEnv(t)}
	got, _ := lines(t, b, r, "kern:1000", "stream", "waitrel:100", "kern:2000", "run:3000:500:3000")
	must.SliceLen(t, 5, got)
	must.Eq(t, []string{"kern 0", "stream 0", "waitrel 0", "kern 0"}, got[:4])
	w := parseWindow(t, got[4])
	t.Logf("after the release, at 25%%: %.2f%% of the GPU", w.share())
	must.Between(t, 23, w.share(), 27)
}

// Pacing survives the context its events were made in: after a reset of
// the primary context (cudaDeviceReset; the handle stays, its events die)
// and in a program whose first launch was in a temporary context destroyed
// since, a 25% cap still holds, with kernels four times as long as those
// measured before (a hook charging the old mean would let them run at the
// whole GPU; one whose events all died measures nothing).
func TestPacingSurvivesItsContext(t *testing.T) {
	b := build(t)
	cases := map[string][]string{
		"primary-reset": {"primary", "kern:1000", "launch:20", "reset", "kern:4000", "run:3000:500:3000"},
		"temporary":     {"kern:1000", "launch:1", "newctx", "kern:4000", "run:3000:500:3000"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := run{limits: reservation(t, "compute_pct=25\n"), program: b.kdirect, mode: "direct", env: gpuEnv(t)}
			got, _ := lines(t, b, r, args...)
			must.SliceLen(t, len(args), got)
			w := parseWindow(t, got[len(got)-1])
			t.Logf("%s, at 25%%: %.2f%% of the GPU", name, w.share())
			must.Between(t, 23, w.share(), 27)
		})
	}
}
