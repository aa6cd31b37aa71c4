package interposer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Framework conformance (issue 29): testdata/frameworks.c replays the
// driver call sequences of PyTorch's caching allocator (classic and
// expandable segments), vLLM (CUDA graphs of decode steps, sleep mode),
// XLA's cuda_malloc_async and NCCL's cuMem buffers, each under a memory
// cap and a compute limit. Over the fake driver (a 4 GiB cap on a 16 GiB
// device) every check must hold; TestGPUCheckFrameworks runs the same
// program and checks over the real driver and prints what held.

var (
	fwOnce sync.Once
	fwProg string
	fwErr  error
)

func frameworksProg(t *testing.T) (*binaries, string) {
	t.Helper()
	b := build(t)
	fwOnce.Do(func() {
		p := filepath.Join(b.dir, "frameworks")
		out, err := exec.Command(compiler(), "-O2", "-Wall", "-Wextra", "-Werror", "-o", p, "testdata/frameworks.c", "-ldl").CombinedOutput()
		if err != nil {
			fwErr = fmt.Errorf("frameworks: %v\n%s", err, out)
			return
		}
		fwProg = p
	})
	if fwErr != nil {
		t.Fatal(fwErr)
	}
	return b, fwProg
}

// fwResult is the program's result line: its name and key=value fields.
type fwResult map[string]string

func (m fwResult) n(k string) int64 {
	v, err := strconv.ParseInt(m[k], 10, 64)
	if err != nil {
		return -1 << 62 // missing: fails every check that reads it
	}
	return v
}

func parseResult(out string) (fwResult, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 2 {
		return nil, fmt.Errorf("no result line in %q", out)
	}
	m := fwResult{"name": f[0]}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m, nil
}

// fwCheck is one fact a sequence must show: held, and what was seen.
type fwCheck struct {
	what string
	held bool
	got  string
}

// fwCase is one framework's sequence: the program's command and its checks,
// given the cap, the slack allowed to figures the driver measures (0 over
// the fake; on a GPU NVML's per-process figure also holds the driver's own
// memory) and the kernel's time alone (ns; 0 over the fake, which counts
// GPU time itself).
type fwCase struct {
	name, arg, escapes string
	checks             func(m fwResult, capB, slack, alone int64) []fwCheck
}

func eq(what string, got, want int64) fwCheck {
	return fwCheck{what, got == want, fmt.Sprintf("%d (want %d)", got, want)}
}

// near: a figure of the driver's; -1 when the driver's figure is unknown
// (on a GPU, NVML has none for this pid: a pid namespace), not measured.
func near(what string, got, want, slack int64) fwCheck {
	if got == -1 || want == -1 {
		return fwCheck{what, true, "not measured"}
	}
	return fwCheck{what, got >= want-slack && got <= want+slack, fmt.Sprintf("%d (want %d)", got, want)}
}

func atMost(what string, got, most int64) fwCheck {
	if got == -1 {
		return fwCheck{what, true, "not measured"}
	}
	return fwCheck{what, got <= most, fmt.Sprintf("%d (at most %d)", got, most)}
}

// common: every call succeeded, the share was the cap, the driver never
// held more than the cap, nothing it held went uncharged, all given back.
func common(m fwResult, capB, slack int64) []fwCheck {
	c := []fwCheck{
		{"every call succeeded", m["errors"] == "0", "errors " + m["errors"] + ", first " + m["fail"]},
		eq("memory info's total is the cap", m.n("cap"), capB),
	}
	if m.n("peak") >= 0 && m.n("end") >= 0 {
		c = append(c, atMost("driver's peak within the cap", m.n("peak"), capB+slack),
			atMost("driver memory never uncharged", m.n("uncharged"), slack),
			atMost("all given back at the end", m.n("end"), slack))
	} else {
		c = append(c, fwCheck{"driver's figures", true, "not measured (NVML has no figure for this pid)"})
	}
	return c
}

func up(n, g int64) int64 { return (n + g - 1) / g * g }

const fwMiB = int64(1 << 20)

var fwCases = []fwCase{
	{name: "torch", arg: "torch",
		escapes: "none seen",
		checks: func(m fwResult, capB, slack, _ int64) []fwCheck {
			seg := up(capB/8+fwMiB, 2*fwMiB)
			return append(common(m, capB, slack),
				eq("large segments until refused", m.n("segs"), (capB-2*fwMiB)/seg),
				eq("refused at the cap (OOM)", m.n("fill_rc"), 2),
				eq("cache miss refused", m.n("first_rc"), 2),
				eq("retry after freeing the cache", m.n("retry_rc"), 0),
				eq("more than the share refused", m.n("toobig_rc"), 2),
				eq("empty_cache: memory info all free", m.n("end_free"), capB))
		}},
	{name: "expandable", arg: "expandable",
		escapes: "none seen",
		checks: func(m fwResult, capB, slack, _ int64) []fwCheck {
			seg := m.n("seg")
			h := capB / max(seg, 1)
			return append(common(m, capB, slack),
				eq("handles until refused", m.n("handles"), h),
				eq("growth refused at the cap", m.n("grow_rc"), 2),
				near("shrunk by half: the driver", m.n("half"), h/2*seg, slack),
				eq("shrunk by half: charged", m.n("half_lib"), h/2*seg),
				eq("grown back to the cap", m.n("regrown"), h),
				eq("then refused", m.n("regrow_rc"), 2))
		}},
	{name: "vllm-graph/global", arg: "graph:0:4:250:%d:1000", escapes: "none seen", checks: graphChecks(25)},
	{name: "vllm-graph/thread-local", arg: "graph:1:4:250:%d:1000", escapes: "none seen", checks: graphChecks(25)},
	{name: "vllm-sleep", arg: "sleep",
		escapes: "none seen",
		checks: func(m fwResult, capB, slack, _ int64) []fwCheck {
			awake := 4*up(capB/10, 2*fwMiB) + up(capB*45/100, 2*fwMiB)
			return append(common(m, capB, slack),
				eq("weights and KV cache mapped", m.n("awake_rc"), 0),
				near("awake: the driver", m.n("awake"), awake, slack),
				eq("awake: charged", m.n("awake_lib"), awake),
				eq("beyond the share refused", m.n("extra_rc"), 2),
				atMost("asleep: the driver", m.n("asleep"), slack),
				eq("asleep: charged", m.n("asleep_lib"), 0),
				eq("asleep: the room usable", m.n("other_rc"), 0),
				eq("woken", m.n("wake_rc"), 0),
				near("woken: the driver", m.n("woke"), awake, slack),
				eq("woken: charged", m.n("woke_lib"), awake))
		}},
	{name: "xla/default-pool", arg: "xla:default", checks: xlaChecks, escapes: xlaEscapes},
	{name: "xla/new-pool", arg: "xla:new", checks: xlaChecks, escapes: xlaEscapes},
	{name: "tf/cuMemAllocAsync", arg: "xla:async", checks: xlaChecks, escapes: xlaEscapes},
	{name: "nccl/ncclCuMemFree", arg: "nccl:nccl",
		escapes: "handles a peer imports (cuMemImportFromShareableHandle) are not charged to it (the exporter is charged)",
		checks: func(m fwResult, capB, slack, _ int64) []fwCheck {
			c := ncclChecks(m, capB, slack, 0)
			return append(c, near("unmapped, not released: the driver still holds it", m.n("between"), m.n("full"), slack))
		}},
	{name: "nccl/release-first", arg: "nccl:release-first", escapes: "as nccl/ncclCuMemFree", checks: ncclChecks},
}

const xlaEscapes = "a pool that reserves more than an allocation asks is charged after it (over the cap until the next trim)"

func graphChecks(pct float64) func(m fwResult, capB, slack, alone int64) []fwCheck {
	return func(m fwResult, capB, slack, alone int64) []fwCheck {
		busy := float64(m.n("busy_ns"))
		if alone > 0 {
			busy = float64(m.n("kernels") * alone)
		}
		share := 100 * busy / float64(max(m.n("wall_ns"), 1))
		lo, hi := pct-2, pct+2
		if alone > 0 {
			lo, hi = pct-5, pct+5 // a GPU's and the host's clocks (gpu-check's bound)
		}
		return append(common(m, capB, slack),
			eq("eager steps", m.n("eager_rc"), 0),
			eq("cuStreamBeginCapture", m.n("begin_rc"), 0),
			eq("capturing", m.n("capturing"), 1),
			eq("launches captured", m.n("launch_rc"), 0),
			eq("cuStreamEndCapture", m.n("end_rc"), 0),
			eq("cuGraphInstantiate", m.n("inst_rc"), 0),
			eq("replays", m.n("replay_rc"), 0),
			fwCheck{"replays paced to the share", m.n("replays") > 0 && share >= lo && share <= hi,
				fmt.Sprintf("%.2f%% (want %.0f-%.0f), %d replays", share, lo, hi, m.n("replays"))})
	}
}

func xlaChecks(m fwResult, capB, slack, _ int64) []fwCheck {
	size := up(capB*3/4, 2*fwMiB)
	return append(common(m, capB, slack),
		eq("preallocated", m.n("pre_rc"), 0),
		fwCheck{"the pool keeps the preallocation", m.n("prealloc") >= size && m.n("prealloc") <= capB,
			fmt.Sprintf("%d (want %d..%d)", m.n("prealloc"), size, capB)},
		eq("allocations refused at the cap", m.n("alloc_rc"), 2),
		fwCheck{"allocations before", m.n("allocs") >= 1, fmt.Sprint(m.n("allocs"))},
		atMost("the pool's reserve within the cap", m.n("full_reserved"), capB+slack),
		eq("kept after the frees: charged", m.n("kept_lib"), m.n("kept")),
		eq("trimmed to 0", m.n("trimmed"), 0),
		eq("trimmed: charged", m.n("trimmed_lib"), 0))
}

func ncclChecks(m fwResult, capB, slack, _ int64) []fwCheck {
	size := m.n("size")
	bufs := capB / max(size, 1)
	return append(common(m, capB, slack),
		eq("buffers until refused", m.n("bufs"), bufs),
		eq("refused at the cap", m.n("over_rc"), 2),
		eq("exported as POSIX fds", m.n("exported"), bufs),
		near("the driver holds them", m.n("full"), bufs*size, slack))
}

// runCase runs one case's program; cmd's environment is set by the caller.
func runCase(c *exec.Cmd) (fwResult, error) {
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %v\n%s%s", c.Args, err, out, stderr.String())
	}
	return parseResult(string(out))
}

// Over the fake driver: a 4 GiB cap and compute_pct=25 on a 16 GiB device,
// the simulated clock for the graphs' replays; every check holds.
func TestFrameworkConformance(t *testing.T) {
	b, prog := frameworksProg(t)
	capB := int64(4 * gib)
	for _, fc := range fwCases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			arg := fc.arg
			if strings.Contains(arg, "%d") {
				arg = fmt.Sprintf(arg, 0)
			}
			r := run{
				limits:  reservation(t, fmt.Sprintf("memory_bytes=%d\ncompute_pct=25\n", capB)),
				program: prog, mode: arg,
				env: append(gpuEnv(t), "FAKECUDA_TOTAL_BYTES="+strconv.Itoa(16*gib)),
			}
			m, err := runCase(r.cmd(b))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range fc.checks(m, capB, 0, 0) {
				if !c.held || strings.HasPrefix(c.got, "not measured") { // the fake always says
					t.Errorf("%s: %s", c.what, c.got)
				}
			}
			t.Logf("%v", m)
		})
	}
	// without a compute limit the same replays take the GPU: the pacing
	// above is the library's
	t.Run("vllm-graph/no-compute-limit", func(t *testing.T) {
		t.Parallel()
		r := run{limits: reservation(t, fmt.Sprintf("memory_bytes=%d\n", capB)), program: prog,
			mode: "graph:0:4:250:0:1000", env: append(gpuEnv(t), "FAKECUDA_TOTAL_BYTES="+strconv.Itoa(16*gib))}
		m, err := runCase(r.cmd(b))
		if err != nil {
			t.Fatal(err)
		}
		share := 100 * float64(m.n("busy_ns")) / float64(max(m.n("wall_ns"), 1))
		if m.n("end_rc") != 0 || share < 95 {
			t.Errorf("unpaced replays: end_rc %d, %.2f%% of the GPU (want over 95)", m.n("end_rc"), share)
		}
	})
}

// On a machine with a GPU (make gpu-check): each sequence over the real
// driver, under a cap of a quarter of the GPU (at most 8 GiB) and
// compute_pct=25; prints "framework / what holds / what escapes".
func TestGPUCheckFrameworks(t *testing.T) {
	if os.Getenv(envGPUCheck) != "1" {
		t.Skip("run by make gpu-check on a machine with a GPU (" + envGPUCheck + "=1)")
	}
	table, ok, err := checkFrameworks(t, true)
	fmt.Print(table)
	if err != nil {
		t.Fatalf("gpu-check: %v", err)
	}
	if !ok {
		t.Fatal("gpu-check: some framework sequences did not hold (above)")
	}
}

// The same report over the fake driver (a 1 GiB cap on a 4 GiB device, on
// the simulated clock), where every sequence holds: the GPU check itself
// is tested on machines without a GPU.
func TestGPUCheckFrameworksOverTheFakeDriver(t *testing.T) {
	table, ok, err := checkFrameworks(t, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table)
	if !ok || strings.Count(table, "\n") != len(fwCases)+3 {
		t.Fatalf("want every framework held:\n%s", table)
	}
}

// checkFrameworks runs every case under the cap, as TestGPUCheck's
// gpucheck does (over the real driver: no fake, the library preloaded);
// the table, and whether every check held.
func checkFrameworks(t *testing.T, real bool) (string, bool, error) {
	_, prog := frameworksProg(t)
	g := newGPUChecker(t, real)
	l, err := g.fields("", "info")
	if err != nil {
		return "", false, err
	}
	total := int64(num(l[0][2]))
	capB := min(total/4, 8*gib) / fwMiB * fwMiB
	c, err := g.fieldsOn(g.clock(1)(0), "", "calib:250") // the kernel alone, unpaced
	if err != nil {
		return "", false, err
	}
	iters, alone := c[0][2], int64(num(c[0][3]))
	if alone == 0 {
		return "", false, fmt.Errorf("calibration measured no GPU time: %v", c[0])
	}
	slack := int64(0)
	if real {
		slack = 64 * fwMiB // NVML's figure also holds the driver's own memory
	}
	limits := fmt.Sprintf("memory_bytes=%d\ncompute_pct=25\n", capB)
	var w strings.Builder
	fmt.Fprintf(&w, "gpushare frameworks on %s: cap %d MiB, compute_pct=25, kernels of %.3f ms\n\n",
		strings.Join(l[0][5:], " "), capB/fwMiB, float64(alone)/1e6)
	fmt.Fprintf(&w, "  %-24s %-44s %s\n", "framework", "what holds", "what escapes")
	ok := true
	for _, fc := range fwCases {
		arg := fc.arg
		if strings.Contains(arg, "%d") {
			arg = fmt.Sprintf(arg, num(iters))
		}
		cmd := g.cmd(g.clock(1)(0), limits, arg)
		cmd.Path, cmd.Args = prog, []string{prog, arg}
		m, err := runCase(cmd)
		if err != nil {
			ok = false
			fmt.Fprintf(&w, "  %-24s %-44s %s\n", fc.name, "-", "did not run: "+strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		var held, not []string
		for _, ch := range fc.checks(m, capB, slack, alone) {
			if ch.held {
				held = append(held, ch.what)
			} else {
				not = append(not, ch.what+": "+ch.got)
			}
		}
		esc := fc.escapes
		if len(not) > 0 {
			ok = false
			esc = "NOT HELD: " + strings.Join(not, "; ")
		}
		fmt.Fprintf(&w, "  %-24s %-44s %s\n", fc.name,
			fmt.Sprintf("%d of %d checks, peak %s of %d MiB", len(held), len(held)+len(not), mibOf(m.n("peak")), capB/fwMiB), esc)
	}
	return w.String(), ok, nil
}

func mibOf(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n/fwMiB, 10)
}
