package interposer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// realLibcuda skips unless NVIDIA's libcuda.so.1 is in a system library
// directory (Debian's libcuda1, non-free; .ci/run installs it). In CI it
// fails instead.
func realLibcuda(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/libcuda.so.1", "/lib/*/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("NVIDIA's libcuda.so.1 not found in the system library directories: .ci/run installs it (apt-get install libcuda1 from Debian's non-free archive)")
	}
	t.Skip("NVIDIA's libcuda.so.1 not installed (Debian: apt-get install libcuda1, from non-free; .ci/run does it)")
	return ""
}

// The library over NVIDIA's real driver, found by the loader
// (GPUSHARE_REAL_LIBCUDA unset), on a machine without a GPU: every error the
// driver returns reaches the program unchanged (cuInit fails, then every
// call says "not initialised"), nothing crashes, and an allocation the driver
// refused is not charged (three 4 MiB allocations under a 10 MiB cap all get
// the driver's error, not the cap's). Only an allocation over the cap gets
// CUDA_ERROR_OUT_OF_MEMORY (2) from the library itself. A launch under a
// compute limit cannot make its events (no GPU, no context): it says so once
// on stderr, runs unpaced and gets the driver's own error.
func TestRealDriverErrorsPassThrough(t *testing.T) {
	path := realLibcuda(t)
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("the nvidia kernel module is loaded: this test is for machines without a GPU")
	}
	b := build(t)
	cc := compiler()
	dyn := filepath.Join(t.TempDir(), "realdriver-dlopen")
	direct := filepath.Join(t.TempDir(), "realdriver-direct")
	for _, args := range [][]string{
		{"-O2", "-Wall", "-Wextra", "-Werror", "-o", dyn, "testdata/realdriver.c", "-ldl"},
		{"-O2", "-Wall", "-Wextra", "-Werror", "-DLINKED", "-o", direct, "testdata/realdriver.c", filepath.Dir(path) + "/libcuda.so.1", "-ldl"},
	} {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
		}
	}
	runIt := func(t *testing.T, prog, mode string, limits string, size int) (string, string) {
		t.Helper()
		c := exec.Command(prog, mode, strconv.Itoa(size))
		c.Env = []string{"PATH=" + os.Getenv("PATH")} // no LD_LIBRARY_PATH, no GPUSHARE_REAL_LIBCUDA
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
	for _, m := range []struct{ name, prog string }{{"direct", direct}, {"dlsym", dyn}} {
		t.Run(m.name, func(t *testing.T) {
			bare, _ := runIt(t, m.prog, m.name, "", 4*mib)
			lines := strings.Split(strings.TrimSpace(bare), "\n")
			if len(lines) != 9 || lines[0] == "init 0" {
				t.Fatalf("without the library, over %s: want cuInit to fail (no GPU), got:\n%s", path, bare)
			}
			t.Logf("the real driver without a GPU:\n%s", bare)

			under, stderr := runIt(t, m.prog, m.name, reservation(t, capOf(10*mib)), 4*mib)
			if under != bare {
				t.Errorf("under the library the driver's results changed:\n got:\n%s\nwant (without it):\n%s", under, bare)
			}
			if stderr != "" {
				t.Errorf("the library complained over the real driver: %s", stderr)
			}

			paced, stderr := runIt(t, m.prog, m.name, reservation(t, "compute_pct=30\n"), 4*mib)
			if paced != bare {
				t.Errorf("under a compute limit the driver's results changed:\n got:\n%s\nwant (without it):\n%s", paced, bare)
			}
			if want := "gpushare: cannot create CUDA events to measure kernels: launches are not paced\n"; stderr != want {
				t.Errorf("under a compute limit, stderr %q, want %q", stderr, want)
			}

			over, _ := runIt(t, m.prog, m.name, reservation(t, capOf(10*mib)), 16*mib)
			want := strings.Join(lines[:2], "\n") + "\nalloc 2\nalloc 2\nalloc 2\n" + strings.Join(lines[5:], "\n") + "\n"
			if over != want {
				t.Errorf("over the cap:\n got:\n%s\nwant:\n%s", over, want)
			}
		})
	}
}
