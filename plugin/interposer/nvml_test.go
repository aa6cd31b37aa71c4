package interposer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// nvmlBinaries are the fake libnvidia-ml.so.1 (in the shared build
// directory, so LD_LIBRARY_PATH finds it) and the two builds of
// testdata/nvmlprog.c.
type nvmlBinaries struct {
	fake, direct, dyn string
}

var (
	nvmlOnce  sync.Once
	nvmlBuilt *nvmlBinaries
	nvmlErr   error
)

func buildNVML(t testing.TB) (*binaries, *nvmlBinaries) {
	t.Helper()
	b := build(t)
	nvmlOnce.Do(func() {
		n := &nvmlBinaries{
			fake:   filepath.Join(b.dir, "libnvidia-ml.so.1"),
			direct: filepath.Join(b.dir, "nvmlprog-direct"),
			dyn:    filepath.Join(b.dir, "nvmlprog-dlopen"),
		}
		for _, args := range [][]string{
			{"-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-Wl,-soname,libnvidia-ml.so.1", "-o", n.fake, "testdata/fakenvml.c"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-DLINKED", "-o", n.direct, "testdata/nvmlprog.c", "-L" + b.dir, "-l:libnvidia-ml.so.1", "-ldl"},
			{"-O2", "-Wall", "-Wextra", "-Werror", "-o", n.dyn, "testdata/nvmlprog.c", "-ldl"},
		} {
			if out, err := exec.Command(compiler(), args...).CombinedOutput(); err != nil {
				nvmlErr = fmt.Errorf("%s %s: %v\n%s", compiler(), strings.Join(args, " "), err, out)
				return
			}
		}
		nvmlBuilt = n
	})
	if nvmlErr != nil {
		t.Fatal(nvmlErr)
	}
	return b, nvmlBuilt
}

var nvmlModes = []string{"direct", "dlopen"}

func (n *nvmlBinaries) prog(mode string) string {
	if mode == "direct" {
		return n.direct
	}
	return n.dyn
}

// nvml runs the NVML program over the fake NVML (and the fake driver's
// environment), with the interposer unless noLib, under limits unless "".
func nvml(t *testing.T, b *binaries, r run, env []string, args ...string) []string {
	t.Helper()
	c := r.cmd(b, args...)
	c.Env = append(c.Env, env...)
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", r.mode, args, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// Under a cap NVML reports the share: total = the cap, used = what the
// reservation's processes hold (here another process, through the usage
// region: the NVML program never touches the driver), free = the rest.
// _v2 reports no reserved memory (the driver's reservation is the GPU's).
// For both ways a program finds NVML.
func TestNVMLMemoryUnderCap(t *testing.T) {
	b, n := buildNVML(t)
	dir := reservation(t, capOf(10*mib))
	holder := start(t, b, run{limits: dir, mode: "direct"}, "alloc:6291456", "wait")
	if l := holder.next(t); l != "alloc 0" {
		t.Fatalf("holder: %q", l)
	}
	for _, m := range nvmlModes {
		t.Run(m, func(t *testing.T) {
			got := nvml(t, b, run{limits: dir, program: n.prog(m), mode: m}, nil, "init", "info:0", "info2:0")
			check(t, got, "init 0",
				fmt.Sprintf("info 0 %d %d %d", 10*mib, 4*mib, 6*mib),
				fmt.Sprintf("info2 0 %d 0 %d %d", 10*mib, 4*mib, 6*mib))
		})
	}
}

// A task on two GPUs (issue 29, defect 9d): NVML reports each GPU's own
// use, and as its total the cap less what the task holds on its other
// GPU (the cap is the task's, over all its GPUs: what it may still hold
// here), so free is the task's room on either. A process holds 1 GiB on
// CUDA device 0 and 2 GiB on device 1 under a 4 GiB cap; NVML numbers the
// devices the other way round (PCI order), so only their UUIDs match them
// up. Before, both GPUs reported total 4, used 3: the whole task's use on
// each.
func TestNVMLPerDevice(t *testing.T) {
	b, n := buildNVML(t)
	dir := reservation(t, capOf(4<<30))
	env := []string{"FAKECUDA_DEVICES=2", "FAKENVML_DEVICES=2", fmt.Sprintf("FAKECUDA_TOTAL_BYTES=%d", 16<<30)}
	// 512 MiB more on device 0, freed while device 1 is current: a free
	// returns its charge to the device it was charged on
	holder := start(t, b, run{limits: dir, mode: "direct", env: env},
		"alloc:1073741824", "alloc:536870912", "device:1", "alloc:2147483648", "free:1", "wait")
	for _, want := range []string{"alloc 0", "alloc 0", "device 0", "alloc 0", "free 0"} {
		if l := holder.next(t); l != want {
			t.Fatalf("holder: %q, want %q", l, want)
		}
	}
	for _, m := range nvmlModes {
		t.Run(m, func(t *testing.T) {
			got := nvml(t, b, run{limits: dir, program: n.prog(m), mode: m}, env, "init", "info:0", "info2:0", "info:1", "info2:1")
			check(t, got, "init 0",
				// NVML's 0 is CUDA's 1: 2 GiB here, 1 elsewhere
				fmt.Sprintf("info 0 %d %d %d", 3<<30, 1<<30, 2<<30),
				fmt.Sprintf("info2 0 %d 0 %d %d", 3<<30, 1<<30, 2<<30),
				// NVML's 1 is CUDA's 0: 1 GiB here, 2 elsewhere
				fmt.Sprintf("info 0 %d %d %d", 2<<30, 1<<30, 1<<30),
				fmt.Sprintf("info2 0 %d 0 %d %d", 2<<30, 1<<30, 1<<30))
		})
	}
}

// A cap above the GPU's memory leaves the GPU's total, and free is never
// more than the GPU really has free (other tenants hold 1.5 of its 2 GiB).
func TestNVMLNeverAboveTheGPU(t *testing.T) {
	b, n := buildNVML(t)
	env := []string{fmt.Sprintf("FAKENVML_TOTAL_BYTES=%d", 2<<30), fmt.Sprintf("FAKENVML_USED_BYTES=%d", 3<<29)}
	for _, m := range nvmlModes {
		got := nvml(t, b, run{limits: reservation(t, capOf(8<<30)), program: n.prog(m), mode: m}, env, "init", "info:0", "info2:0")
		check(t, got, "init 0",
			fmt.Sprintf("info 0 %d %d 0", 2<<30, 1<<29),
			fmt.Sprintf("info2 0 %d 0 %d 0", 2<<30, 1<<29))
	}
}

// Without limits (a process not under gpushare) and without the library,
// NVML's own figures; NVML's errors (before nvmlInit) pass through
// unchanged under a cap.
func TestNVMLPassThrough(t *testing.T) {
	b, n := buildNVML(t)
	real := []string{"init 0",
		fmt.Sprintf("info 0 %d %d %d", 16<<30, 15<<30, 1<<30),
		fmt.Sprintf("info2 0 %d %d %d %d", 16<<30, 256*mib, 15<<30, 1<<30-256*mib)}
	for _, m := range nvmlModes {
		t.Run(m, func(t *testing.T) {
			check(t, nvml(t, b, run{program: n.prog(m), mode: m}, nil, "init", "info:0", "info2:0"), real...)
			check(t, nvml(t, b, run{noLib: true, limits: reservation(t, capOf(10*mib)), program: n.prog(m), mode: m}, nil,
				"init", "info:0", "info2:0"), real...)
			check(t, nvml(t, b, run{limits: reservation(t, capOf(10*mib)), program: n.prog(m), mode: m}, nil,
				"info:0", "info2:0"), "info 1 0 0 0", "info2 1 0 0 0 0")
		})
	}
}

// realLibNVML skips unless NVIDIA's libnvidia-ml.so.1 is in a system
// library directory (Debian's libnvidia-ml1, non-free); in CI it fails.
func realLibNVML(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/libnvidia-ml.so.1", "/lib/*/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("NVIDIA's libnvidia-ml.so.1 not found in the system library directories: .ci/run installs it (apt-get install libnvidia-ml1 from Debian's non-free archive)")
	}
	t.Skip("NVIDIA's libnvidia-ml.so.1 not installed (Debian: apt-get install libnvidia-ml1, from non-free; .ci/run does it)")
	return ""
}

// The library over NVIDIA's real NVML, found by the loader, on a machine
// without a GPU: nvmlInit fails (driver not loaded) and every later call
// says so, the same with and without the library, which adds nothing to
// stderr and crashes nothing.
func TestRealNVMLErrorsPassThrough(t *testing.T) {
	path := realLibNVML(t)
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("the nvidia kernel module is loaded: this test is for machines without a GPU")
	}
	b, n := buildNVML(t)
	direct := filepath.Join(t.TempDir(), "nvmlprog-real")
	args := []string{"-O2", "-Wall", "-Wextra", "-Werror", "-DLINKED", "-o", direct, "testdata/nvmlprog.c", path, "-ldl"}
	if out, err := exec.Command(compiler(), args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler(), strings.Join(args, " "), err, out)
	}
	runIt := func(t *testing.T, prog, mode, limits string) (string, string) {
		t.Helper()
		c := exec.Command(prog, mode, "init", "info:0", "info2:0", "shutdown")
		c.Env = []string{"PATH=" + os.Getenv("PATH")} // no LD_LIBRARY_PATH, no GPUSHARE_REAL_LIBNVML
		if limits != "" {
			c.Env = append(c.Env, "LD_PRELOAD="+b.lib, "GPUSHARE_LIMITS="+limits)
		}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s %s (limits %q): %v (a crash?)\nstdout:\n%s\nstderr:\n%s", prog, mode, limits, err, out, stderr.String())
		}
		return string(out), stderr.String()
	}
	for _, m := range []struct{ name, prog string }{{"direct", direct}, {"dlopen", n.dyn}} {
		t.Run(m.name, func(t *testing.T) {
			bare, bareErr := runIt(t, m.prog, m.name, "")
			if !strings.HasPrefix(bare, "init ") || strings.HasPrefix(bare, "init 0\n") {
				t.Fatalf("without the library, over %s: want nvmlInit to fail (no GPU), got:\n%s", path, bare)
			}
			t.Logf("the real NVML without a GPU:\n%s", bare)
			under, underErr := runIt(t, m.prog, m.name, reservation(t, capOf(10*mib)))
			if under != bare {
				t.Errorf("under the library NVML's results changed:\n got:\n%s\nwant (without it):\n%s", under, bare)
			}
			if underErr != bareErr {
				t.Errorf("the library changed stderr:\n got:\n%s\nwant:\n%s", underErr, bareErr)
			}
		})
	}
}
