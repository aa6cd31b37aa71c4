package interposer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// The compute tests run testdata/kernprog.c as real processes on the fake
// driver's GPU (testdata/fakegpu.c): kernels of every process that names
// the same FAKECUDA_GPU file run one at a time, in submission order; a
// kernel "k<us>" runs <us> microseconds. A process's share is the GPU time
// of its kernels (the fake's accounting, not the library's) over a window.
//
// In the tests the GPU's clock is simulated (testdata/simclock.c, preloaded
// with FAKECUDA_CLOCK): time stands still while any of the test's threads
// runs and jumps to the next wake-up when all of them wait, so the figures
// are those of the programs' own calls, whatever the host's speed or load.
// The same scenarios on the host's clock are benchmarks (bench_test.go):
// reported, never asserted.

// gpuEnv is a fake GPU of its own, on a simulated clock, for the processes
// given it.
func gpuEnv(t testing.TB) []string {
	dir := t.TempDir()
	return []string{"FAKECUDA_GPU=" + filepath.Join(dir, "gpu"), "FAKECUDA_CLOCK=" + filepath.Join(dir, "clock")}
}

// wallGPU is a fake GPU of its own on the host's CLOCK_MONOTONIC (the
// benchmarks').
func wallGPU(t testing.TB) []string {
	return []string{"FAKECUDA_GPU=" + filepath.Join(t.TempDir(), "gpu")}
}

// channel makes a TGS channel (as the plugin does: plugin/limits.go) and
// links it into each reservation directory as "tgs".
func channel(t testing.TB, dirs ...string) string {
	t.Helper()
	data := make([]byte, 4096)
	binary.LittleEndian.PutUint32(data, 0x67737467)
	binary.LittleEndian.PutUint32(data[4:], 1)
	path := filepath.Join(t.TempDir(), "channel")
	must.NoError(t, os.WriteFile(path, data, 0o666))
	for _, d := range dirs {
		must.NoError(t, os.Link(path, filepath.Join(d, "tgs")))
	}
	return path
}

// window is what "run" printed: the process's GPU time, the time and its
// kernels in the measured window.
type window struct {
	busy, wall float64 // ns
	kernels    float64
}

func (w window) share() float64 { return 100 * w.busy / w.wall }
func (w window) rate() float64  { return w.kernels / w.wall } // kernels per ns

// kernRun is one kernprog process: its run and its commands ("run:..." last).
type kernRun struct {
	run
	args []string
}

func kprog(b *binaries, mode string) string {
	if mode == "direct" {
		return b.kdirect
	}
	return b.kdyn
}

// parseWindow reads a "run" line.
func parseWindow(t testing.TB, line string) window {
	t.Helper()
	var w window
	var rc int
	_, err := fmt.Sscanf(line, "run %d %f %f %f", &rc, &w.busy, &w.wall, &w.kernels)
	must.NoError(t, err, must.Sprintf("%q", line))
	must.Zero(t, rc)
	return w
}

// together starts the processes at once and returns each one's window; on
// a simulated clock they are the round's parties (FAKECUDA_PARTIES), so
// they start at the same simulated time, and FAKECUDA_PARTY orders them
// where they are due at the same time.
func together(t testing.TB, b *binaries, runs ...kernRun) []window {
	t.Helper()
	type result struct {
		out  []byte
		err  error
		errs strings.Builder
	}
	res := make([]*result, len(runs))
	done := make(chan int)
	for i, r := range runs {
		res[i] = &result{}
		r.env = append(slices.Clip(r.env), fmt.Sprintf("FAKECUDA_PARTIES=%d", len(runs)), fmt.Sprintf("FAKECUDA_PARTY=%d", i))
		c := r.cmd(b, r.args...)
		c.Stderr = &res[i].errs
		go func() {
			res[i].out, res[i].err = c.Output()
			done <- i
		}()
	}
	for range runs {
		<-done
	}
	ws := make([]window, len(runs))
	for i, r := range res {
		must.NoError(t, r.err, must.Sprintf("%v: %s", runs[i].args, r.errs.String()))
		lines := strings.Split(strings.TrimSpace(string(r.out)), "\n")
		ws[i] = parseWindow(t, lines[len(lines)-1])
	}
	return ws
}

// runOne runs one process to its end and returns its window and stderr.
func runOne(t testing.TB, b *binaries, r kernRun) (window, string) {
	t.Helper()
	c := r.cmd(b, r.args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	must.NoError(t, err, must.Sprintf("%v: %s", r.args, stderr.String()))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return parseWindow(t, lines[len(lines)-1]), stderr.String()
}

// The scenarios below run in the tests on a simulated clock (gpuEnv) and
// in the benchmarks on the host's (wallGPU): gpu is the GPU's environment.

// perTask: two processes of one reservation capped at 30%, 2 ms kernels,
// 4 s, measured from 1 s to 3.5 s.
func perTask(t testing.TB, b *binaries, gpu []string) []window {
	res := reservation(t, "compute_pct=30\n")
	one := kernRun{run{limits: res, program: b.kdirect, mode: "direct", env: gpu}, []string{"kern:2000", "run:4000:1000:3500"}}
	return together(t, b, one, one)
}

// capsPair: a process capped at 30% launching 4 ms kernels and one at 70%
// launching 2 ms kernels from two threads, on one GPU for 5 s, measured
// from 1 s to 4.5 s; lib false: the same without the library.
func capsPair(t testing.TB, b *binaries, gpu []string, lib bool) []window {
	const measure = "run:5000:1000:4500"
	a := kernRun{run{limits: reservation(t, "compute_pct=30\n"), noLib: !lib, program: b.kdirect, mode: "direct", env: gpu},
		[]string{"kern:4000", measure}}
	// two launching threads: the 70% process keeps a kernel queued while
	// it wakes up (on the host's clock the host's wake-up latency would
	// otherwise hold it below its cap, which is an upper bound)
	c := kernRun{run{limits: reservation(t, "compute_pct=70\n"), noLib: !lib, program: b.kdirect, mode: "direct", env: gpu},
		[]string{"kern:2000", "threads:2", measure}}
	return together(t, b, a, c)
}

// capAlone: one process capped at 30% (threads launching threads at once:
// "threads:N" when n > 1), 2 ms kernels (1 ms with threads), 3 s measured
// from 0.5 s.
func capAlone(t testing.TB, b *binaries, gpu []string, lib bool, threads int) window {
	args := []string{"kern:2000", "run:3000:500:3000"}
	if threads > 1 {
		args = []string{fmt.Sprintf("threads:%d", threads), "kern:1000", "run:2000:400:2000"}
	}
	r := kernRun{run{limits: reservation(t, "compute_pct=30\n"), noLib: !lib, program: b.kdirect, mode: "direct", env: gpu}, args}
	return together(t, b, r)[0]
}

// queued: 300 kernels of 1 ms launched without waiting, then one
// synchronize, in a process capped at 30%; the time it took, in ms.
func queued(t testing.TB, b *binaries, gpu []string, lib bool) float64 {
	r := run{limits: reservation(t, "compute_pct=30\n"), noLib: !lib, program: b.kdirect, mode: "direct", env: gpu}
	got := r.output(t, b, "clock", "kern:1000", "launch:300", "clock")
	must.SliceLen(t, 4, got)
	must.Eq(t, []string{"kern 0", "launch 0"}, got[1:3])
	var t0, t1 uint64
	_, err := fmt.Sscanf(got[0], "clock 0 %d", &t0)
	must.NoError(t, err)
	_, err = fmt.Sscanf(got[3], "clock 0 %d", &t1)
	must.NoError(t, err)
	return float64(t1-t0) / 1e6
}

// The simulated clock gives the same figures on every run, whatever the
// host's speed or load: the same two processes (one of them launching from
// two threads) run twice, on GPUs and clocks of their own, report the same
// windows, to the nanosecond and the kernel. Threads due at the same
// simulated time, which a host would run in any order, run in one that is
// fixed by the run (testdata/simclock.c).
func TestSimulatedClockRepeats(t *testing.T) {
	b := build(t)
	first := capsPair(t, b, gpuEnv(t), true)
	second := capsPair(t, b, gpuEnv(t), true)
	t.Logf("first %+v, second %+v", first, second)
	must.Eq(t, first, second)
	must.Positive(t, first[0].kernels)
}

// A task's share is the task's, not each process's: two processes of one
// reservation capped at 30% get 30% between them (paced separately, they
// would take 60%); the pacer lives in the usage region they share.
func TestComputeCapIsPerTask(t *testing.T) {
	b := build(t)
	ws := perTask(t, b, gpuEnv(t))
	sum := ws[0].share() + ws[1].share()
	t.Logf("two processes of one task at 30%%: %.2f%% + %.2f%% = %.2f%%", ws[0].share(), ws[1].share(), sum)
	must.Between(t, 28, sum, 32)
}

// A task with shares of two GPUs at 25% (issue 29, defect 6) gets 25% of
// EACH: two processes of one reservation, one launching on CUDA device 0
// and one on device 1 (the fake's two GPUs, a timeline each), each held
// to 25% of its own GPU. Before, one pacer summed the time of both, and
// the two got 25% between them (12.5% each).
func TestComputeCapIsPerDevice(t *testing.T) {
	b := build(t)
	res := reservation(t, "compute_pct=25\n")
	env := append(gpuEnv(t), "FAKECUDA_DEVICES=2")
	on := func(dev string) kernRun {
		return kernRun{run{limits: res, program: b.kdirect, mode: "direct", env: env},
			[]string{"device:" + dev, "kern:2000", "run:4000:1000:3500"}}
	}
	ws := together(t, b, on("0"), on("1"))
	t.Logf("one task at 25%% on two GPUs: %.2f%% of device 0, %.2f%% of device 1", ws[0].share(), ws[1].share())
	must.Between(t, 23, ws[0].share(), 27)
	must.Between(t, 23, ws[1].share(), 27)
}

// Without a usage region to share (here "usage" is a directory, so it
// cannot be opened) each process paces itself, and says so: a limit, never
// none.
func TestComputeCapWithoutARegionIsPerProcess(t *testing.T) {
	b := build(t)
	res := reservation(t, "compute_pct=30\n")
	must.NoError(t, os.Mkdir(filepath.Join(res, "usage"), 0o755))
	w, stderr := runOne(t, b, kernRun{run{limits: res, program: b.kdirect, mode: "direct", env: gpuEnv(t)}, []string{"kern:2000", "run:3000:500:3000"}})
	t.Logf("alone at 30%% without a region: %.2f%%", w.share())
	must.StrContains(t, stderr, "compute paced per process")
	must.Between(t, 28, w.share(), 32)
}

// Two processes in two reservations, capped at 30% and 70%, launch as fast
// as they can (each kernel waited for) on one GPU: each gets its cap, though
// the 30% one launches kernels twice as long. Without the library the GPU's
// launch order decides (the GPU alternates between one 4 ms kernel and the
// other's two 2 ms ones: half each), and a process alone at 30% is held
// there (alone, unpaced, it takes the whole GPU).
func TestComputeCapsOnSharedGPU(t *testing.T) {
	b := build(t)
	for _, lib := range []bool{true, false} {
		name := map[bool]string{true: "library", false: "no-library"}[lib]
		t.Run(name, func(t *testing.T) {
			ws := capsPair(t, b, gpuEnv(t), lib)
			t.Logf("%s: shares %.2f%% (cap 30%%, 4 ms kernels) and %.2f%% (cap 70%%, 2 ms kernels)", name, ws[0].share(), ws[1].share())
			if lib {
				must.Between(t, 28, ws[0].share(), 32)
				must.Between(t, 66, ws[1].share(), 72)
			} else {
				must.Greater(t, 45, ws[0].share())
			}
		})
	}
	t.Run("alone", func(t *testing.T) {
		for _, lib := range []bool{true, false} {
			w := capAlone(t, b, gpuEnv(t), lib, 1)
			t.Logf("alone, library %v: share %.2f%% (cap 30%%)", lib, w.share())
			if lib {
				must.Between(t, 28, w.share(), 32)
			} else {
				must.Greater(t, 95, w.share())
			}
		}
	})
}

// Every way of reaching a launch is paced: the linked symbol, dlsym, and
// cuGetProcAddress (the _ptsz variants with the per-thread-stream flag,
// the plain ones through cuGetProcAddress), for cuLaunchKernel,
// cuLaunchKernelEx, cuLaunchCooperativeKernel and the legacy cuLaunchGrid,
// cuLaunchGridAsync and cuLaunch (issue 44, 12: they ran unpaced, 100%).
// A path the library missed would run unpaced, at the whole GPU.
func TestEveryLaunchPathIsPaced(t *testing.T) {
	b := build(t)
	for _, mode := range []string{"direct", "dlsym", "procaddr", "procaddr1"} {
		for _, via := range []string{"plain", "ex", "coop", "grid", "gridasync", "legacy"} {
			t.Run(mode+"/"+via, func(t *testing.T) {
				t.Parallel() // a GPU and a clock each
				r := kernRun{run{limits: reservation(t, "compute_pct=30\n"), program: kprog(b, mode), mode: mode, env: gpuEnv(t)},
					[]string{"via:" + via, "kern:2000", "run:2000:400:2000"}}
				w := together(t, b, r)[0]
				t.Logf("%s/%s: share %.2f%% (cap 30%%)", mode, via, w.share())
				must.Between(t, 28, w.share(), 32)
			})
		}
	}
}

// A _ptsz launch on the NULL stream runs on the per-thread default stream:
// its events are recorded there (CU_STREAM_PER_THREAD), not on the legacy
// stream a NULL stream means to cuEventRecord; a plain launch's are not.
func TestPerThreadStreamEvents(t *testing.T) {
	b := build(t)
	for mode, want := range map[string]string{"procaddr": "ptds 0 20", "procaddr1": "ptds 0 0"} {
		r := run{limits: reservation(t, "compute_pct=50\n"), program: b.kdyn, mode: mode, env: gpuEnv(t)}
		for _, via := range []string{"plain", "ex", "coop"} {
			check(t, r.output(t, b, "via:"+via, "kern:100", "launch:10", "ptds"), "via 0", "kern 0", "launch 0", want)
		}
	}
}

// A task without a compute limit keeps its launch path: not one event call
// reaches the driver, whether it is not under gpushare, has compute_pct 100,
// or is production without a channel. A paced task's do (the control).
func TestUnlimitedLaunchPathUntouched(t *testing.T) {
	b := build(t)
	cases := []struct {
		name, limits string // limits "": not under gpushare
		events       bool
	}{
		{"not-under-gpushare", "", false},
		{"compute-100", "compute_pct=100\n", false},
		{"production-without-channel", "compute_pct=40\nclass=production\n", false},
		{"opportunistic-100-without-channel", "compute_pct=100\nclass=opportunistic\n", false},
		{"paced", "compute_pct=50\n", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run{program: b.kdirect, mode: "direct"}
			if c.limits != "" {
				r.limits = reservation(t, c.limits)
			}
			got := r.output(t, b, "kern:10", "launch:1000", "events")
			if c.events {
				must.NotEq(t, "events 0 0", got[2])
			} else {
				check(t, got, "kern 0", "launch 0", "events 0 0")
			}
		})
	}
}

// A driver that will not create events: launches go through unpaced, with
// one line on stderr; nothing hangs or fails.
func TestNoEventsMeansNotPaced(t *testing.T) {
	b := build(t)
	w, stderr := runOne(t, b, kernRun{run{limits: reservation(t, "compute_pct=30\n"), program: b.kdirect, mode: "direct",
		env: append(gpuEnv(t), "FAKECUDA_NO_EVENTS=1")}, []string{"kern:2000", "run:1000:200:1000"}})
	t.Logf("no events at 30%%: share %.2f%%", w.share())
	must.Greater(t, 95, w.share())
	must.Eq(t, 1, strings.Count(stderr, "\n"))
	must.StrContains(t, stderr, "cannot create CUDA events")
}

// A tgs file that is not a channel (wrong size or magic) is ignored with a
// line on stderr: production runs unhindered (the whole GPU), an
// opportunistic task at its compute_pct.
func TestBadChannelIgnored(t *testing.T) {
	b := build(t)
	for _, class := range []string{"production", "opportunistic"} {
		t.Run(class, func(t *testing.T) {
			dir := reservation(t, "compute_pct=30\nclass="+class+"\n")
			must.NoError(t, os.WriteFile(filepath.Join(dir, "tgs"), make([]byte, 4096), 0o666))
			w, stderr := runOne(t, b, kernRun{run{limits: dir, program: b.kdirect, mode: "direct", env: gpuEnv(t)}, []string{"kern:2000", "run:1500:300:1500"}})
			must.StrContains(t, stderr, "is not a TGS channel of this version")
			t.Logf("%s with a bad channel: share %.2f%%", class, w.share())
			if class == "production" {
				must.Greater(t, 95, w.share())
			} else {
				must.Between(t, 28, w.share(), 32)
			}
		})
	}
}

// A paced process whose threads launch at once (4 threads, each launching
// and waiting) is held to its cap as one: the pacer is the process's, its
// mutex makes the threads take turns.
func TestThreadsOfAPacedProcess(t *testing.T) {
	b := build(t)
	w := capAlone(t, b, gpuEnv(t), true, 4)
	t.Logf("4 threads at 30%%: share %.2f%%", w.share())
	must.Between(t, 28, w.share(), 32)
}

// A process that queues kernels without waiting for them cannot run ahead
// of its measurements: 300 kernels of 1 ms at 30% take about 1 s (300 ms of
// GPU time / 0.3), though launching them takes no time and the GPU runs
// them in 0.3 s. It fills the pool of events (64 kernels in flight) and
// waits for the oldest.
func TestQueuedLaunchesArePaced(t *testing.T) {
	b := build(t)
	for _, lib := range []bool{true, false} {
		ms := queued(t, b, gpuEnv(t), lib)
		t.Logf("300 x 1 ms queued, library %v: %.1f ms", lib, ms)
		if lib {
			must.Between(t, 900, ms, 1100)
		} else {
			must.Between(t, 299, ms, 301)
		}
	}
}

// A process of the run killed while it holds the simulated clock (it is
// due, or runs) does not stop the others: a waiter finds its pid gone and
// the clock goes on. Without the reaping the survivor would wait for ever.
func TestSimulatedClockSurvivesAKilledParty(t *testing.T) {
	b := build(t)
	gpu := append(gpuEnv(t), "FAKECUDA_PARTIES=2")
	victim := run{program: b.kdirect, mode: "direct", env: append(slices.Clip(gpu), "FAKECUDA_PARTY=1")}.cmd(b, "kern:1000", "run:600000:0:600000")
	out, err := victim.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, victim.Start())
	t.Cleanup(func() { _ = victim.Process.Kill() })
	survivor := kernRun{run{program: b.kdirect, mode: "direct", env: append(slices.Clip(gpu), "FAKECUDA_PARTY=0")}, []string{"kern:1000", "run:2000:500:2000"}}
	done := make(chan window, 1)
	go func() { w, _ := runOne(t, b, survivor); done <- w }()
	line, err := bufio.NewReader(out).ReadString('\n') // "kern 0": the victim runs
	must.NoError(t, err)
	must.Eq(t, "kern 0\n", line)
	must.NoError(t, victim.Process.Kill())
	_ = victim.Wait() // reaped: a zombie's pid still answers kill(pid, 0)
	select {
	case w := <-done:
		t.Logf("the survivor after its party was killed: %.2f%% of the GPU", w.share())
		must.Greater(t, 0, w.kernels)
	case <-time.After(2 * time.Minute): // liveness only
		t.Fatal("the survivor waited for its killed party")
	}
}
