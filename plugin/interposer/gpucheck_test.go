package interposer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nvmlsrc "github.com/gpushare/gpushare/devicefn/nvml"
	"github.com/shoenig/test/must"
)

// `make gpu-check` (GPUSHARE_GPU_CHECK=1) runs these checks over the
// machine's real driver and NVML and prints what held; without the
// variable the same checks run over the fake driver, where each must hold:
// that is how CI tests the check itself.
const envGPUCheck = "GPUSHARE_GPU_CHECK"

// checkRow is one line of the report.
type checkRow struct {
	name, want, got string
	held            bool
	measured        bool // a figure reported, not a limit checked (held is not read)
	metric          string
	value           float64 // reported as metric by BenchmarkGPUCheckFakeDriver
}

// gpuChecker runs testdata/gpucheck.c under the library, over the real
// driver or the fake one.
type gpuChecker struct {
	t    testing.TB
	b    *binaries
	prog string
	real bool
	gpu  string // the fake GPU's timeline file, shared by the processes
}

var (
	gpucheckOnce sync.Once
	gpucheckBin  string
	gpucheckErr  error
)

func newGPUChecker(t testing.TB, real bool) *gpuChecker {
	b := build(t)
	gpucheckOnce.Do(func() {
		gpucheckBin = filepath.Join(b.dir, "gpucheck")
		out, err := exec.Command(compiler(), "-O2", "-Wall", "-Wextra", "-Werror", "-o", gpucheckBin, "testdata/gpucheck.c", "-ldl").CombinedOutput()
		if err != nil {
			gpucheckErr = fmt.Errorf("building gpucheck: %v\n%s", err, out)
		}
	})
	if gpucheckErr != nil {
		t.Fatal(gpucheckErr)
	}
	return &gpuChecker{t: t, b: b, prog: gpucheckBin, real: real, gpu: filepath.Join(t.TempDir(), "gpu")}
}

// cmd is the program under limits ("": without the library), with clock
// the environment of its simulated clock (nil: the host's; see clock).
func (g *gpuChecker) cmd(clock []string, limits string, args ...string) *exec.Cmd {
	dir := ""
	if limits != "" {
		dir = reservation(g.t, limits)
	}
	return g.cmdIn(clock, dir, args...)
}

// cmdIn is cmd in the reservation directory dir ("": without the library).
func (g *gpuChecker) cmdIn(clock []string, dir string, args ...string) *exec.Cmd {
	c := exec.Command(g.prog, args...)
	env := []string{"PATH=" + os.Getenv("PATH")}
	if !g.real {
		env = append(env, "LD_LIBRARY_PATH="+g.b.dir, "GPUSHARE_REAL_LIBCUDA="+g.b.fake,
			"FAKECUDA_TOTAL_BYTES="+strconv.Itoa(4<<30))
		if len(clock) == 0 {
			env = append(env, "FAKECUDA_GPU="+g.gpu)
		}
	}
	var preload []string
	if len(clock) > 0 && !g.real {
		preload = append(preload, g.b.simclock) // first: the library's clock is the simulated one
		env = append(env, clock...)
	}
	if dir != "" {
		preload = append(preload, g.b.lib)
		env = append(env, "GPUSHARE_LIMITS="+dir)
	}
	if len(preload) > 0 {
		env = append(env, "LD_PRELOAD="+strings.Join(preload, " "))
	}
	c.Env = env
	return c
}

// clock is, over the fake driver, the environment of a simulated clock
// (testdata/simclock.c) shared by the parties of one run, with a fake GPU
// of its own (its timeline is in that clock's time), so that what the
// compute checks measure does not depend on the host's load; nil over a
// real driver, whose GPU keeps real time.
func (g *gpuChecker) clock(parties int) func(party int) []string {
	c := g.clockOn()
	return func(party int) []string { return c(parties, party) }
}

// clockOn is one clock and GPU for runs one after the other, each of its
// parties started together: the clock carries on from one run to the
// next, as a host's does (a reservation's pacer state, kept from one run to
// the next, stays in the past).
func (g *gpuChecker) clockOn() func(parties, party int) []string {
	dir := g.t.TempDir()
	return func(parties, party int) []string {
		if g.real {
			return nil
		}
		return []string{"FAKECUDA_CLOCK=" + filepath.Join(dir, "clock"), "FAKECUDA_GPU=" + filepath.Join(dir, "gpu"),
			fmt.Sprintf("FAKECUDA_PARTIES=%d", parties), fmt.Sprintf("FAKECUDA_PARTY=%d", party)}
	}
}

// fields runs the program to its end; its output's lines, split.
func (g *gpuChecker) fields(limits string, args ...string) ([][]string, error) {
	return g.fieldsOn(nil, limits, args...)
}

// fieldsOn is fields on a clock.
func (g *gpuChecker) fieldsOn(clock []string, limits string, args ...string) ([][]string, error) {
	return g.output(g.cmd(clock, limits, args...), args)
}

// output runs c (the program with args) to its end; its output's lines, split.
func (g *gpuChecker) output(c *exec.Cmd, args []string) ([][]string, error) {
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		lines = append(lines, strings.Fields(l))
	}
	if err != nil {
		return lines, fmt.Errorf("gpucheck %v: %v: %s%s", args, err, out, stderr.String())
	}
	return lines, nil
}

func num(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

const checkMiB = 1 << 20

// run is every check, in order; the first error (no driver) stops it.
func (g *gpuChecker) run() (string, []checkRow, error) {
	lines, err := g.fields("", "info")
	if err != nil {
		if len(lines) > 0 && len(lines[0]) > 1 && lines[0][0] == "init" {
			return "", nil, fmt.Errorf("no usable GPU: cuInit returned %s (100: no device; 999: unknown, e.g. no kernel module)", lines[0][1])
		}
		return "", nil, err
	}
	info := lines[0]
	total := num(info[2])
	gpu := fmt.Sprintf("%s (%d MiB)", strings.Join(info[5:], " "), total/checkMiB)
	var rows []checkRow

	// memory: a cap a quarter of the GPU, at most 1 GiB
	capB := min(total/4, 1<<30) / checkMiB * checkMiB
	limits := fmt.Sprintf("memory_bytes=%d\n", capB)
	l, err := g.fields(limits, "info", "fill:64")
	if err != nil {
		return gpu, rows, err
	}
	rows = append(rows, checkRow{name: "memory info reports the share", want: fmt.Sprintf("total %d MiB", capB/checkMiB),
		got: fmt.Sprintf("total %d MiB, free %d MiB", num(l[0][2])/checkMiB, num(l[0][3])/checkMiB), held: num(l[0][2]) == capB && num(l[0][3]) <= capB})
	got := num(l[1][2])
	rows = append(rows, checkRow{name: "allocations stop at the cap", want: fmt.Sprintf("%d..%d MiB, then 2 (out of memory)", (capB-64*checkMiB)/checkMiB, capB/checkMiB),
		got: fmt.Sprintf("%d MiB, then %s", got/checkMiB, l[1][1]), held: got <= capB && got+64*checkMiB > capB && l[1][1] == "2"})
	more, err := g.memoryAccuracy(total)
	rows = append(rows, more...)
	if err != nil {
		return gpu, rows, err
	}

	// two processes of one reservation share its cap
	res := reservation(g.t, limits)
	half := capB / 2 / checkMiB
	// the first holds its memory until the second is done (it is then
	// killed): a long hold, so that a loaded host cannot end it early
	first := g.cmd(nil, "", fmt.Sprintf("take:%d", half), "hold:600000")
	first.Env = append(first.Env, "LD_PRELOAD="+g.b.lib, "GPUSHARE_LIMITS="+res)
	out, err := first.StdoutPipe()
	if err != nil {
		return gpu, rows, err
	}
	if err := first.Start(); err != nil {
		return gpu, rows, err
	}
	sc := bufio.NewScanner(out)
	var a uint64
	if sc.Scan() {
		a = num(strings.Fields(sc.Text())[2])
	}
	second := g.cmd(nil, "", "fill:64")
	second.Env = append(second.Env, "LD_PRELOAD="+g.b.lib, "GPUSHARE_LIMITS="+res)
	o2, err := second.Output()
	_ = first.Process.Kill()
	_, _ = io.Copy(io.Discard, out)
	_ = first.Wait()
	if err != nil {
		return gpu, rows, fmt.Errorf("second process: %v", err)
	}
	bb := num(strings.Fields(string(o2))[2])
	rows = append(rows, checkRow{name: "two processes share one cap", want: fmt.Sprintf("%d MiB, then %d..%d MiB", half, (capB-half*checkMiB-64*checkMiB)/checkMiB, capB/checkMiB-half),
		got: fmt.Sprintf("%d MiB, then %d MiB", a/checkMiB, bb/checkMiB), held: a == half*checkMiB && a+bb <= capB && a+bb+64*checkMiB > capB})

	// compute: 2 ms kernels, measured alone, then two processes capped at
	// 30% and 70% at once, in turns on their GPU's rotation as the plugin
	// links it (src/slice.c, "Side by side"), and again each paced on its
	// own (turn_ms=0, how the library paced them before: measured), and one
	// alone at 30%
	l, err = g.fieldsOn(g.clock(1)(0), "", "calib:2000")
	if err != nil {
		return gpu, rows, err
	}
	n, alone := l[0][2], num(l[0][3])
	if alone == 0 {
		return gpu, rows, fmt.Errorf("calibration measured no GPU time: %v", l[0])
	}
	k := kernels{n: n, alone: alone}
	share := k.share
	for _, c := range []struct {
		extra, spin, name string
		measured          bool
	}{
		{"", "spin:" + n + ":4000", "", false},
		{"turn_ms=0\n", "spin:" + n + ":4000", " (not in turns)", true},
		// a framework's deep queue: 16 kernels launched, then waited for
		{"", "spin:" + n + ":5000:1000:0:16", " (16 queued)", false},
	} {
		d30, d70 := reservation(g.t, "compute_pct=30\ntimeslice_id=301\n"+c.extra), reservation(g.t, "compute_pct=70\ntimeslice_id=302\n"+c.extra)
		sliceFile(g.t, d30, d70)
		spin := []string{c.spin}
		both, err := g.pair(g.clockOn(), [2]string{d30, d70}, [2][]string{spin, spin})
		if err != nil {
			return gpu, rows, fmt.Errorf("compute runs: %v", err)
		}
		p30, p70 := share(both[0][0]), share(both[1][0])
		name := "caps 30% and 70% side by side" + c.name
		rows = append(rows, checkRow{name: name, want: "30 and 70 (within 5 points)", measured: c.measured,
			got: fmt.Sprintf("%.1f and %.1f (kernels of %.2f ms)", p30, p70, float64(alone)/1e6), held: math.Abs(p30-30) <= 5 && math.Abs(p70-70) <= 5})
	}
	l, err = g.fieldsOn(g.clock(1)(0), "compute_pct=30\n", "spin:"+n+":3000")
	if err != nil {
		return gpu, rows, err
	}
	p := share(l[0])
	rows = append(rows, checkRow{name: "compute cap 30% alone", want: "30 (within 5 points)", got: fmt.Sprintf("%.1f", p), held: math.Abs(p-30) <= 5})
	// the benchmark's rows (gpucheck_rows_test.go): a step that fails is
	// a row not held, and the next steps still run (a GPU's time is dear)
	for _, step := range []struct {
		name string
		f    func(kernels) ([]checkRow, error)
	}{{"compute accuracy", g.computeAccuracy}, {"noisy neighbours", g.noisyNeighbours}, {"graph under a cap", g.graphUnderACap}, {"overheads", g.overheads}} {
		more, err := step.f(k)
		rows = append(rows, more...)
		if err != nil {
			g.t.Logf("gpu-check: %s: %v", step.name, err)
			msg, _, _ := strings.Cut(err.Error(), "\n")
			rows = append(rows, checkRow{name: step.name + ": failed", want: "no error", got: msg[:min(len(msg), 100)]})
		}
	}
	return gpu, rows, nil
}

// report prints the rows as a table and says whether all held.
func report(w io.Writer, gpu string, rows []checkRow) bool {
	fmt.Fprintf(w, "gpushare gpu-check on %s\n\n", gpu)
	all := true
	for _, r := range rows {
		mark := "held"
		switch {
		case r.measured:
			mark = "measured"
		case !r.held:
			mark, all = "NOT HELD", false
		}
		fmt.Fprintf(w, "  %-48s want %-38s got %-52s %s\n", r.name, r.want, r.got, mark)
	}
	return all
}

// On a machine with a GPU: `make gpu-check`.
func TestGPUCheck(t *testing.T) {
	if os.Getenv(envGPUCheck) != "1" {
		t.Skip("run by make gpu-check on a machine with a GPU (" + envGPUCheck + "=1)")
	}
	g := newGPUChecker(t, true)
	gpu, rows, err := g.run()
	ok := true
	if gpu != "" {
		ok = report(os.Stdout, gpu, rows)
	}
	if err != nil {
		t.Fatalf("gpu-check: %v", err)
	}
	// the plugin's NVML source over the real library
	src := nvmlsrc.New(nvmlsrc.Options{})
	defer src.Close()
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatalf("gpu-check: the plugin's NVML source: %v", err)
	}
	fmt.Printf("\nthe plugin's NVML source: %d GPU(s), driver %s, CUDA %s\n", len(inv.GPUs), inv.DriverVersion, inv.CUDAVersion)
	for i, gp := range inv.GPUs {
		fmt.Printf("  GPU %d %s %s %d MiB, links %v\n", i, gp.UUID, gp.Model, gp.MemoryMiB, inv.Links[i])
	}
	if !ok {
		t.Fatal("gpu-check: some limits did not hold (above)")
	}
}

// The same checks over the fake driver, where every one must hold: the
// check itself is tested on machines without a GPU.
func TestGPUCheckOverTheFakeDriver(t *testing.T) {
	g := newGPUChecker(t, false)
	start := time.Now()
	gpu, rows, err := g.run()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	ok := report(&b, gpu, rows)
	t.Logf("%s(%s)", b.String(), time.Since(start).Round(time.Millisecond))
	// every row but the measured ones (wall-clock figures, only reported)
	// holds: these are facts of the library on the simulated clock
	measured := 0
	for _, r := range rows {
		if r.measured {
			measured++
		}
	}
	if len(rows) != gpuCheckRows || measured != gpuCheckMeasured || !ok {
		t.Fatalf("want %d rows (%d of them measured), all others held; got %d (%d measured):\n%s",
			gpuCheckRows, gpuCheckMeasured, len(rows), measured, b.String())
	}
}

// On a machine without a GPU (CI has NVIDIA's libcuda.so.1 but no device)
// the check says there is no usable GPU, with cuInit's answer, rather than
// a table of failures.
func TestGPUCheckWithoutAGPUSaysSo(t *testing.T) {
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("the nvidia kernel module is loaded: this test is for machines without a GPU")
	}
	if m, _ := filepath.Glob("/usr/lib/*/libcuda.so.1"); len(m) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("NVIDIA's libcuda.so.1 is missing: .ci/run installs it (libcuda1)")
		}
		t.Skip("NVIDIA's libcuda.so.1 not installed")
	}
	g := newGPUChecker(t, true)
	gpu, rows, err := g.run()
	must.EqOp(t, "", gpu)
	must.SliceEmpty(t, rows)
	must.ErrorContains(t, err, "no usable GPU: cuInit returned 100")
}
