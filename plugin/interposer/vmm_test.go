package interposer

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Memory the driver keeps after the program let it go (issue 29, defect
// 2), exec (9c) and compute_pct=0 (9b), over the fake driver's model of
// VMM handles, pools and graph memory (testdata/fakevmm.c), with
// testdata/vmmprog.c. A 4 GiB cap on a 16 GiB device, as in the issue.

const gib = 1 << 30

var (
	vmmOnce sync.Once
	vmmProg string
	vmmErr  error
)

// vmmprog builds testdata/vmmprog.c once (beside the other binaries).
func vmmprog(t *testing.T) (*binaries, run) {
	t.Helper()
	b := build(t)
	vmmOnce.Do(func() {
		p := filepath.Join(b.dir, "vmmprog")
		out, err := exec.Command(compiler(), "-O2", "-Wall", "-Wextra", "-Werror", "-o", p, "testdata/vmmprog.c", "-ldl", "-pthread").CombinedOutput()
		if err != nil {
			vmmErr = fmt.Errorf("vmmprog: %v\n%s", err, out)
			return
		}
		vmmProg = p
	})
	if vmmErr != nil {
		t.Fatal(vmmErr)
	}
	return b, run{
		limits:  reservation(t, fmt.Sprintf("memory_bytes=%d\n", 4*gib)),
		program: vmmProg,
		mode:    "dlsym",
		env:     []string{"FAKECUDA_TOTAL_BYTES=" + strconv.Itoa(16*gib)},
	}
}

func g(n int) string { return strconv.Itoa(n * gib) }

// The driver frees a cuMemCreate handle's memory at the last of
// cuMemRelease and cuMemUnmap, in either order; the charge stays until
// then, so the device never holds more than the cap (it held 12 GiB).
func TestVMMChargeHeldUntilReleasedAndUnmapped(t *testing.T) {
	for _, mode := range []string{"dlsym", "procaddr"} {
		t.Run(mode, func(t *testing.T) { testVMMCharge(t, mode) })
	}
}

func testVMMCharge(t *testing.T, mode string) {
	b, r := vmmprog(t)
	r.mode = mode
	got := r.output(t, b,
		// release before unmap (NVIDIA's samples): still mapped, still held
		"create:"+g(3), "reserve:"+g(3), "map:1:0", "release:0",
		"create:"+g(3), "fake", "info",
		"unmap:1:"+g(3), "fake", "info",
		// unmap before release: still a handle, still held
		"create:"+g(3), "reserve:"+g(3), "map:3:2", "unmap:3:"+g(3),
		"create:"+g(2), "release:2", "create:"+g(2), "fake")
	check(t, got,
		"create 0", "reserve 0", "map 0", "release 0",
		"create 2", // the released handle is still mapped: 3 GiB held
		"fake 0 "+g(3), "info 0 "+g(1)+" "+g(4),
		"unmap 0", "fake 0 0", "info 0 "+g(4)+" "+g(4),
		"create 0", "reserve 0", "map 0", "unmap 0",
		"create 2", // unmapped, not released: held
		"release 0", "create 0", "fake 0 "+g(2))
}

// A pool with a high release threshold keeps freed memory reserved (XLA's
// and TensorFlow's cuda_malloc_async): the reserve is charged, and trimmed
// when a charge would go over the cap, so the device never holds more than
// the cap (it held 6-9 GiB).
func TestPoolReserveWithinCap(t *testing.T) {
	for _, mode := range []string{"dlsym", "procaddr"} {
		t.Run(mode, func(t *testing.T) { testPoolReserve(t, mode) })
	}
}

func testPoolReserve(t *testing.T, mode string) {
	b, r := vmmprog(t)
	r.mode = mode
	got := r.output(t, b,
		"defpool", "threshold:0:"+g(16), // keep everything
		"async:"+g(3), "freeasync:1", "reserved:0", "info",
		"alloc:"+g(3), "fake", "reserved:0", // the pool trimmed to make room
		"free:2",
		"poolcreate", "threshold:3:"+g(16),
		"poolalloc:3:"+g(3), "freeasync:4", "poolalloc:3:"+g(2), // reuses the reserve
		"reserved:3", "info", "async:"+g(2), "fake", "reserved:3", "async:"+g(1))
	check(t, got,
		"defpool 0", "threshold 0",
		"async 0", "freeasync 0",
		"reserved 0 "+g(3),        // the driver keeps it
		"info 0 "+g(1)+" "+g(4),   // and it is charged
		"alloc 0", "fake 0 "+g(3), // within the cap
		"reserved 0 0", // the idle reserve went back
		"free 0",
		"poolcreate 0", "threshold 0",
		"poolalloc 0", "freeasync 0", "poolalloc 0",
		"reserved 0 "+g(3), "info 0 "+g(1)+" "+g(4), // 2 in use, 1 idle: all charged
		"async 0",          // over the cap with the idle GiB: it is trimmed first
		"fake 0 "+g(4),     // 2 + 2: the cap, not 5
		"reserved 0 "+g(2), // what is in use stays
		"async 2")          // nothing idle left to trim
}

// A graph memory node is allocated when the graph is launched: a node
// larger than the room under the cap is refused when added, a launch is
// charged ahead and the graph reserve after it, so later allocations
// are refused, or take the reserve back by a trim, after which a relaunch
// that no longer fits is refused (a replay allocated 12 GiB).
func TestGraphMemoryNodesWithinCap(t *testing.T) {
	for _, mode := range []string{"dlsym", "procaddr"} {
		t.Run(mode, func(t *testing.T) { testGraphMemory(t, mode) })
	}
}

func testGraphMemory(t *testing.T, mode string) {
	b, r := vmmprog(t)
	r.mode = mode
	// graphs 0 and 1, executable 2; the launch is cuGraphLaunch (the
	// library's hook), which maps graph 1's node in the fake driver as
	// the real one does
	got := r.output(t, b, "graph", "graph",
		"graphnode:0:"+g(12),
		"graphnode:1:"+g(3), "inst:1", "launch:2", "launch:2", "fake", "info",
		"alloc:"+g(1), "fake", "alloc:"+g(1), "fake", "launch:2", "fake", "peak")
	check(t, got, "graph 0", "graph 0",
		"graphnode 2",
		"graphnode 0", "inst 0", "launch 0",
		"launch 0", "fake 0 "+g(3), // a second launch reuses the reserve
		"info 0 "+g(1)+" "+g(4),
		"alloc 0", "fake 0 "+g(4),
		"alloc 0", "fake 0 "+g(2), // over the cap: the graph's reserve trimmed first
		"launch 2", "fake 0 "+g(2), // it must map its 3 GiB again: no room
		"peak 0 "+g(4))
}

// A process that execs (same pid, a new image) had its memory freed with
// the old image's driver state: its charge goes too, and the new image
// sees the whole share.
func TestExecResetsTheCharge(t *testing.T) {
	b, r := vmmprog(t)
	got := r.output(t, b, "alloc:"+g(3), "info", "exec", "info", "alloc:"+g(4), "info")
	check(t, got, "alloc 0", "info 0 "+g(1)+" "+g(4), "exec 0",
		"info 0 "+g(4)+" "+g(4), "alloc 0", "info 0 0 "+g(4))
}

// compute_pct=0 would pace every launch for ever: the limits file is
// refused (no memory, no pacing) with a line on stderr that names it.
func TestComputePctZeroRefused(t *testing.T) {
	mustRefuseLimits(t, "compute_pct=0\n", "compute_pct=0: must be 1-100")
}

// A round of turns out of range, or not a number, is refused the same way
// (src/slice.c, "Side by side": a task's turn is its share of the round).
func TestTurnMsOutOfRangeRefused(t *testing.T) {
	mustRefuseLimits(t, "compute_pct=30\nturn_ms=10001\n", "turn_ms=10001: must be 0-10000")
	mustRefuseLimits(t, "compute_pct=30\nturn_ms=100ms\n", "turn_ms=100ms: must be 0-10000")
}

// mustRefuseLimits: a 4 GiB cap with more lines that make the file
// malformed gives no memory, and stderr says why.
func mustRefuseLimits(t *testing.T, more, says string) {
	t.Helper()
	b, r := vmmprog(t)
	r.limits = reservation(t, fmt.Sprintf("memory_bytes=%d\n%s", 4*gib, more))
	c := r.cmd(b, "alloc:1048576")
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	check(t, strings.Split(strings.TrimSpace(string(out)), "\n"), "alloc 2")
	if !strings.Contains(stderr.String(), says) {
		t.Errorf("stderr does not say %q: %q", says, stderr.String())
	}
}

// Each process's context is charged context_bytes (issue 29, defect 2d)
// from its first driver call, so the caps of a full GPU cannot add up to
// more than it has: under a 4 GiB cap with 512 MiB per context, a process
// sees 3.5 GiB, and a second process 3 GiB less what the first holds.
func TestContextMemoryCharged(t *testing.T) {
	b, r := vmmprog(t)
	r.limits = reservation(t, fmt.Sprintf("memory_bytes=%d\ncontext_bytes=%d\n", 4*gib, 512*mib))
	p := start(t, b, r, "info", "alloc:"+g(1), "wait")
	first := []string{p.next(t), p.next(t)}
	check(t, first, "info 0 "+strconv.Itoa(4*gib-512*mib)+" "+g(4), "alloc 0")
	got := r.output(t, b, "info", "alloc:"+g(2), "alloc:"+strconv.Itoa(512*mib), "info")
	check(t, got, "info 0 "+g(2)+" "+g(4), "alloc 0",
		"alloc 2", // 2 contexts + 1 + 2 GiB: no room for another 512 MiB
		"info 0 0 "+g(4))
}
