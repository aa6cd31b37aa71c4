package interposer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const mib = 1 << 20

// The flags of `make build`, plus -Werror: the library must stay warnings clean.
var libFlags = []string{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"}

// binaries are the library, the fake driver and the two builds of the test
// program (linked against libcuda.so.1, and dlopen-only), built once per run.
type binaries struct {
	dir    string // also holds libcuda.so.1: LD_LIBRARY_PATH
	lib    string
	fake   string
	direct string
	dyn    string
	locker string // testdata/lockholder.c
	next   string // testdata/nextlib.c
	// testdata/kernprog.c, linked and dlopen-only (launch_test.go)
	kdirect, kdyn string
	// testdata/simclock.c: the fake GPU's simulated clock, preloaded
	// where a run's environment names FAKECUDA_CLOCK (gpuEnv)
	simclock string
}

var (
	buildOnce sync.Once
	built     *binaries
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "interposer-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// compiler is $CC, else cc, else gcc.
func compiler() string {
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	if _, err := exec.LookPath("cc"); err != nil {
		return "gcc"
	}
	return "cc"
}

// build compiles everything once; a test without a C compiler skips, except
// in CI, where it fails.
func build(t testing.TB) *binaries {
	t.Helper()
	cc := compiler()
	if _, err := exec.LookPath(cc); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no C compiler (%s) in CI: %v", cc, err)
		}
		t.Skipf("no C compiler (%s): %v", cc, err)
	}
	buildOnce.Do(func() {
		b := &binaries{
			dir:    buildDir,
			lib:    filepath.Join(buildDir, "libgpushare-cuda.so"),
			fake:   filepath.Join(buildDir, "libcuda.so.1"),
			direct: filepath.Join(buildDir, "cuprog-direct"),
			dyn:    filepath.Join(buildDir, "cuprog-dlopen"),
			locker: filepath.Join(buildDir, "lockholder"),
			next:   filepath.Join(buildDir, "libnext.so"),

			kdirect: filepath.Join(buildDir, "kernprog-direct"),
			kdyn:    filepath.Join(buildDir, "kernprog-dlopen"),

			simclock: filepath.Join(buildDir, "libsimclock.so"),
		}
		steps := [][]string{
			append(append(append(append([]string{}, libFlags...), "-o", b.lib), Sources(".")...), "-ldl", "-lpthread"),
			{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1", "-o", b.fake, "testdata/fakecuda.c", "testdata/fakegpu.c", "-lpthread"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-DLINKED", "-o", b.direct, "testdata/cuprog.c", "-L" + buildDir, "-l:libcuda.so.1", "-ldl"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-o", b.dyn, "testdata/cuprog.c", "-ldl"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-o", b.locker, "testdata/lockholder.c", "-lpthread"},
			{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", b.next, "testdata/nextlib.c", "-ldl"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-DLINKED", "-o", b.kdirect, "testdata/kernprog.c", "-L" + buildDir, "-l:libcuda.so.1", "-ldl", "-lpthread"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-o", b.kdyn, "testdata/kernprog.c", "-ldl", "-lpthread"},
			{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-o", b.simclock, "testdata/simclock.c", "-ldl", "-lpthread"},
		}
		for _, args := range steps {
			if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
				return
			}
		}
		built = b
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// reservation is a limits directory: "limits" and the shared "usage" region.
func reservation(t testing.TB, limits string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "limits"), []byte(limits), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func capOf(n int) string {
	return fmt.Sprintf("memory_bytes=%d\ncompute_pct=50\nclass=production\n", n)
}

// run describes one run of the test program.
type run struct {
	limits  string   // GPUSHARE_LIMITS; "" leaves it unset
	noLib   bool     // without the interposer
	preload string   // another library preloaded after the interposer
	program string   // "" for the linked build
	mode    string   // direct, dlsym, procaddr, procaddr1
	env     []string // more of the environment (FAKECUDA_GPU, ...)
}

func (r run) cmd(b *binaries, args ...string) *exec.Cmd {
	prog := r.program
	if prog == "" {
		prog = b.direct
	}
	c := exec.Command(prog, append([]string{r.mode}, args...)...)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"LD_LIBRARY_PATH=" + b.dir,
		"GPUSHARE_REAL_LIBCUDA=" + b.fake,
		"FAKECUDA_TOTAL_BYTES=" + strconv.Itoa(1<<30),
	}
	var preload []string
	if slices.ContainsFunc(r.env, func(e string) bool { return strings.HasPrefix(e, "FAKECUDA_CLOCK=") }) {
		preload = append(preload, b.simclock) // first: the library's clock is the simulated one
	}
	if !r.noLib {
		preload = append(preload, b.lib)
	}
	if r.preload != "" {
		preload = append(preload, r.preload)
	}
	if len(preload) > 0 {
		env = append(env, "LD_PRELOAD="+strings.Join(preload, " "))
	}
	if r.limits != "" {
		env = append(env, "GPUSHARE_LIMITS="+r.limits)
	}
	c.Env = append(env, r.env...)
	return c
}

// output runs the program to its end and returns its lines.
func (r run) output(t testing.TB, b *binaries, args ...string) []string {
	t.Helper()
	c := r.cmd(b, args...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", r.mode, args, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// check compares the program's lines with the expected ones, in order.
func check(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d (%s): got %q, want %q", i, strings.Fields(want[i])[0], got[i], want[i])
		}
	}
}

var modes = []struct{ name, prog string }{
	{"direct", ""},   // symbol interposition of a linked program
	{"dlsym", "dyn"}, // dlopen + dlsym from the handle
	{"procaddr", "dyn"},
	{"procaddr1", "dyn"},
}

func (b *binaries) prog(which string) string {
	if which == "dyn" {
		return b.dyn
	}
	return b.direct
}

// Within the cap allocations succeed; over it the call returns
// CUDA_ERROR_OUT_OF_MEMORY (2) and the driver never sees it; memory info
// reports the cap; a free gives its charge back. For each way a program
// finds the driver's functions.
func TestMemoryCap(t *testing.T) {
	b := build(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := run{limits: reservation(t, capOf(10*mib)), program: b.prog(m.prog), mode: m.name}
			got := r.output(t, b,
				"alloc:4194304", "alloc:4194304", "alloc:4194304", "fake",
				"info", "total", "free:0", "alloc:4194304", "fake", "info")
			check(t, got,
				"alloc 0", "alloc 0",
				"alloc 2",                 // over the cap: refused
				"fake 0 8388608",          // and the driver never asked
				"info 0 2097152 10485760", // free: the cap less the use; total: the cap
				"total 0 10485760",        // cuDeviceTotalMem_v2: the cap
				"free 0", "alloc 0",       // a free returns its charge
				"fake 0 8388608", "info 0 2097152 10485760")
		})
	}
}

// The same program and fake without the library: nothing is refused, so the
// refusals above are the library's doing.
func TestWithoutLibraryNothingIsCapped(t *testing.T) {
	b := build(t)
	for _, m := range modes {
		r := run{limits: reservation(t, capOf(10*mib)), noLib: true, program: b.prog(m.prog), mode: m.name}
		got := r.output(t, b, "alloc:4194304", "alloc:4194304", "alloc:4194304", "info")
		check(t, got, "alloc 0", "alloc 0", "alloc 0", fmt.Sprintf("info 0 %d %d", 1<<30-12*mib, 1<<30))
	}
}

// Every allocation path is charged and its free returns the charge: a 6 MiB
// allocation of each kind leaves no room for another 6 MiB under a 10 MiB
// cap; once freed, there is. Pitched allocations settle on the driver's real
// pitch (the fake aligns to 256 bytes, the library first charges 512).
func TestEveryAllocationPathIsCharged(t *testing.T) {
	b := build(t)
	kinds := []string{
		"alloc:6291456", "managed:6291456", "async:6291456", "pool:6291456", "create:6291456",
		"pitch:6291456:1", "array:1572864:1", "array3d:1024:1536:1",
	}
	for _, m := range []string{"dlsym", "procaddr"} { // procaddr: the _ptsz variants
		for _, k := range kinds {
			t.Run(m+"/"+strings.Split(k, ":")[0], func(t *testing.T) {
				r := run{limits: reservation(t, capOf(10*mib)), program: b.dyn, mode: m}
				name := strings.Split(k, ":")[0]
				got := r.output(t, b, k, "alloc:6291456", "fake", "free:0", "alloc:6291456", "fake")
				check(t, got, name+" 0", "alloc 2", "fake 0 6291456", "free 0", "alloc 0", "fake 0 6291456")
			})
		}
	}
	t.Run("pitch-settles", func(t *testing.T) {
		r := run{limits: reservation(t, capOf(10*mib)), program: b.dyn, mode: "dlsym"}
		got := r.output(t, b, "pitch:1100:1000", "info")
		// charged 1536*1000 first, settled on the real 1280*1000
		check(t, got, "pitch 0", fmt.Sprintf("info 0 %d %d", 10*mib-1280*1000, 10*mib))
	})
	t.Run("array-overflow", func(t *testing.T) {
		r := run{limits: reservation(t, capOf(10*mib)), program: b.dyn, mode: "dlsym"}
		got := r.output(t, b, "array3d:4294967296:4294967296:4294967296", "fake")
		check(t, got, "array3d 2", "fake 0 0")
	})
}

// With a cap above the GPU's memory, the GPU's figures stand.
func TestMemoryInfoNeverAboveTheGPU(t *testing.T) {
	b := build(t)
	r := run{limits: reservation(t, capOf(4<<30)), mode: "direct"}
	got := r.output(t, b, "alloc:1048576", "info", "total")
	check(t, got, "alloc 0", fmt.Sprintf("info 0 %d %d", 1<<30-mib, 1<<30), fmt.Sprintf("total 0 %d", 1<<30))
}

// proc is a test program left running, holding what it allocated until its
// stdin closes.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func start(t *testing.T, b *binaries, r run, args ...string) *proc {
	t.Helper()
	c := r.cmd(b, args...)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: c, stdin: in, lines: make(chan string, 64)}
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		c.Process.Kill()
		c.Wait()
	})
	return p
}

func (p *proc) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("program ended early")
		}
		return l
	case <-time.After(2 * time.Minute): // liveness only
		t.Fatalf("no output from the program in 2 minutes")
	}
	return ""
}

// Several processes of one reservation share one cap: eight processes each
// take 1 MiB blocks until refused, all at once, and hold them; together they
// get exactly the cap (check-and-charge is atomic across processes), not
// eight times it.
func TestProcessesShareOneCap(t *testing.T) {
	b := build(t)
	dir := reservation(t, capOf(16*mib))
	const n = 8
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = start(t, b, run{limits: dir, mode: "direct"}, "fill:1048576", "wait", "fake")
	}
	total := 0
	for i, p := range procs {
		var got, rc int
		l := p.next(t)
		if _, err := fmt.Sscanf(l, "fill %d %d", &got, &rc); err != nil || rc != 2 {
			t.Fatalf("process %d: %q, want fill <n> 2", i, l)
		}
		total += got
	}
	if total != 16 {
		t.Errorf("the processes got %d MiB together, want the cap: 16", total)
	}
	held := 0
	for _, p := range procs {
		p.stdin.Close()
		if l := p.next(t); l != "wait 0" {
			t.Fatalf("got %q, want wait 0", l)
		}
		var u int
		if _, err := fmt.Sscanf(p.next(t), "fake 0 %d", &u); err != nil {
			t.Fatal(err)
		}
		held += u
	}
	if held != 16*mib {
		t.Errorf("the fake driver holds %d bytes for them, want %d", held, 16*mib)
	}
}

// A process killed (SIGKILL) while holding memory gives its charge back to
// the reservation: the next process gets the memory, even before the dead one
// is reaped (a zombie holds nothing).
func TestKilledProcessChargeReturns(t *testing.T) {
	b := build(t)
	dir := reservation(t, capOf(10*mib))
	r := run{limits: dir, mode: "direct"}
	holder := start(t, b, r, "alloc:6291456", "wait")
	if l := holder.next(t); l != "alloc 0" {
		t.Fatalf("holder: %q", l)
	}
	// while it lives, its 6 MiB count against the others
	check(t, r.output(t, b, "alloc:6291456", "info"), "alloc 2", fmt.Sprintf("info 0 %d %d", 4*mib, 10*mib))

	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// not reaped yet: poll until the kernel has made it a zombie
	deadline := time.Now().Add(2 * time.Minute) // liveness only
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", holder.cmd.Process.Pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("killed holder did not die")
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(t, r.output(t, b, "info", "alloc:6291456"), fmt.Sprintf("info 0 %d %d", 10*mib, 10*mib), "alloc 0")
	holder.cmd.Wait()
	check(t, r.output(t, b, "alloc:10485760"), "alloc 0")
}

// A task that sets the library's variables after load (its own limits, its
// own driver) changes nothing: they are read once, at load.
func TestLimitVariablesAfterLoadCannotRaiseCap(t *testing.T) {
	b := build(t)
	dir := reservation(t, capOf(4*mib))
	mine := reservation(t, capOf(1<<30))
	r := run{limits: dir, mode: "direct"}
	got := r.output(t, b,
		"setenv:GPUSHARE_LIMITS="+mine, "setenv:GPUSHARE_REAL_LIBCUDA=/nonexistent",
		"alloc:8388608", "info", "fake")
	check(t, got, "setenv 0", "setenv 0", "alloc 2", fmt.Sprintf("info 0 %d %d", 4*mib, 4*mib), "fake 0 0")
}

// The limits file: without GPUSHARE_LIMITS the library passes everything
// through (a process not under gpushare); a reservation whose limits file is
// missing or malformed gets no memory (fail closed, never "no limit");
// unknown keys are ignored and no memory_bytes means no memory cap.
func TestLimitsFile(t *testing.T) {
	b := build(t)
	cases := []struct {
		name   string
		limits *string // nil: GPUSHARE_LIMITS unset; "-": the file missing
		want   string
	}{
		{"unset", nil, "alloc 0"},
		{"missing", ptr("-"), "alloc 2"},
		{"malformed", ptr("memory_bytes=12MiB\n"), "alloc 2"},
		{"no-equals", ptr("memory_bytes\n"), "alloc 2"},
		{"unknown-keys", ptr("# comment\nfuture=1\n memory_bytes = 10485760 \n"), "alloc 2"},
		{"no-memory-key", ptr("compute_pct=20\n"), "alloc 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run{mode: "direct"}
			if c.limits != nil {
				r.limits = t.TempDir()
				if *c.limits != "-" {
					if err := os.WriteFile(filepath.Join(r.limits, "limits"), []byte(*c.limits), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			check(t, r.output(t, b, "alloc:12582912"), c.want)
		})
	}
}

func ptr(s string) *string { return &s }

// A process killed while holding the region's lock does not wedge the
// reservation: the lock is robust, the next process takes it over. (With a
// plain mutex the run below would hang: it has a deadline.)
func TestDeadLockHolderDoesNotWedge(t *testing.T) {
	b := build(t)
	dir := reservation(t, capOf(10*mib))
	r := run{limits: dir, mode: "direct"}
	check(t, r.output(t, b, "alloc:1048576"), "alloc 0") // creates the region
	locker := exec.Command(b.locker, filepath.Join(dir, "usage"))
	out, err := locker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := locker.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder: %q %v", line, err)
	}
	locker.Process.Signal(syscall.SIGKILL)
	locker.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // liveness only
	defer cancel()
	c := r.cmd(b, "alloc:6291456", "alloc:6291456", "info")
	c = exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	c.Env = r.cmd(b).Env
	got, err := c.Output()
	if ctx.Err() != nil {
		t.Fatal("a process hung on the lock its dead holder left")
	}
	if err != nil {
		t.Fatal(err)
	}
	check(t, strings.Split(strings.TrimSpace(string(got)), "\n"),
		"alloc 0", "alloc 2", fmt.Sprintf("info 0 %d %d", 4*mib, 10*mib))
}

// Interposing dlsym must not change what RTLD_NEXT means for other
// libraries: a wrapper preloaded after the interposer still finds the next
// definition, not itself (see testdata/nextlib.c).
func TestDlsymKeepsRTLDNext(t *testing.T) {
	b := build(t)
	for _, noLib := range []bool{true, false} { // without the interposer: the control
		r := run{limits: reservation(t, capOf(10*mib)), noLib: noLib, preload: b.next, mode: "direct"}
		check(t, r.output(t, b, "probe"), "probe 2")
	}
}

// BenchmarkAllocFree: what the library adds to a cuMemAlloc_v2 + cuMemFree_v2
// pair (over the fake driver, in one process per run; the figure is the
// program's own timing, "ns/pair"), without it and under a memory cap, each
// way of finding the driver.
func BenchmarkAllocFree(b *testing.B) {
	bin := build(b)
	for _, m := range []string{"direct", "procaddr"} {
		for _, noLib := range []bool{true, false} {
			name := m + "/capped"
			if noLib {
				name = m + "/no-library"
			}
			b.Run(name, func(b *testing.B) {
				prog := bin.direct
				if m != "direct" {
					prog = bin.dyn
				}
				r := run{limits: reservation(b, capOf(1<<30)), noLib: noLib, program: prog, mode: m}
				line := r.output(b, bin, fmt.Sprintf("bench:%d", max(b.N, 1000)))[0]
				b.ReportMetric(nsFigure(b, line, "bench"), "ns/pair")
			})
		}
	}
}
