package nvml

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// realLibrary returns where the loader would find name (a system library
// directory), or skips: the test needs NVIDIA's real library, which .ci/run
// installs (Debian's libnvidia-ml1, non-free). In CI it fails instead.
func realLibrary(t *testing.T, name, pkg string) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/" + name, "/lib/*/" + name, "/usr/lib64/" + name, "/usr/lib/" + name} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found in the system library directories: .ci/run installs it (apt-get install %s from Debian's non-free archive)", name, pkg)
	}
	t.Skipf("%s not installed (Debian: apt-get install %s, from non-free; .ci/run does it)", name, pkg)
	return ""
}

// Over NVIDIA's real libnvidia-ml.so.1 on a machine without a GPU or the
// nvidia kernel module: NVML loads, nvmlInit says the driver is not loaded,
// and the source reports no devices (devicefn.ErrUnavailable, which the
// plugin turns into an empty fingerprint) with one clear log line.
func TestRealNVMLWithoutGPU(t *testing.T) {
	path := realLibrary(t, "libnvidia-ml.so.1", "libnvidia-ml1")
	// (not /dev/nvidiactl: the driver's libraries create it, run as root)
	if _, err := os.Stat("/proc/driver/nvidia/version"); err == nil {
		t.Skip("the nvidia kernel module is loaded: this test is for machines without it")
	}
	logger, logs := newLogger()
	src := New(Options{Logger: logger}) // the real library: nvml.New()
	defer src.Close()
	inv, err := src.Inventory(context.Background())
	must.Nil(t, inv)
	must.ErrorIs(t, err, devicefn.ErrUnavailable)
	must.StrContains(t, err.Error(), "NVIDIA kernel driver not loaded: is the nvidia kernel module loaded?", must.Sprintf("over %s", path))
	_, err = src.Health(context.Background())
	must.ErrorIs(t, err, devicefn.ErrUnavailable)
	logs.mu.Lock()
	text := logs.buf.String()
	logs.mu.Unlock()
	t.Logf("the log line: %s", text)
	must.Eq(t, 1, logs.count("[WARN]  nvml: cannot use NVML; reporting no GPUs"), must.Sprint(text))
	must.StrContains(t, text, "Driver Not Loaded")
}
