package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// gpushare limit -fake runs a program over the fake CUDA driver that
// 'make fake-driver' writes to bin/fakecuda/libcuda.so.1, with nothing
// else set: the cap holds (the third 4 MiB allocation under 8 MiB is
// refused) without a GPU. Its help says how to build and try it, and
// without the driver it says to build it.
func TestLimitOverTheFakeDriver(t *testing.T) {
	code, _, errOut := run("limit", "-h")
	must.EqOp(t, 0, code)
	must.StrContains(t, errOut, "-fake")
	must.StrContains(t, errOut, "make build fake-driver")
	must.StrContains(t, errOut, "bin/gpushare limit -fake -memory 8MiB -- bin/fakecuda/cuprog direct")

	b := buildInterposer(t)
	t.Chdir(t.TempDir())
	t.Setenv("LD_LIBRARY_PATH", "")
	t.Setenv("GPUSHARE_REAL_LIBCUDA", "")
	must.NoError(t, os.Unsetenv("GPUSHARE_REAL_LIBCUDA"))
	t.Setenv("FAKECUDA_TOTAL_BYTES", "1073741824")
	prog := []string{"--", b.prog, "direct", "alloc:4194304", "alloc:4194304", "alloc:4194304", "info"}

	code, _, errOut = run(append([]string{"limit", "-fake", "-memory", "8MiB", "-library", b.lib}, prog...)...)
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "-fake: the fake CUDA driver was not found")
	must.StrContains(t, errOut, "build it with 'make fake-driver'")

	must.NoError(t, os.MkdirAll(filepath.Join("bin", "fakecuda"), 0o755))
	must.NoError(t, os.Symlink(b.fake, filepath.Join("bin", "fakecuda", "libcuda.so.1")))
	code, out, errOut := run(append([]string{"limit", "-fake", "-memory", "8MiB", "-library", b.lib}, prog...)...)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "alloc 0\nalloc 0\nalloc 2\ninfo 0 0 8388608\n", out)
	must.StrContains(t, errOut, "over the fake CUDA driver ")
}

func TestFakeEnv(t *testing.T) {
	got := fakeEnv([]string{"A=1", "LD_LIBRARY_PATH=/x", "GPUSHARE_REAL_LIBCUDA=/real.so"}, "/b/fakecuda/libcuda.so.1")
	must.Eq(t, []string{"A=1", "LD_LIBRARY_PATH=/b/fakecuda:/x", "GPUSHARE_REAL_LIBCUDA=/b/fakecuda/libcuda.so.1"}, got)
}
