package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/shoenig/test/must"
)

// With sharing = "mps" the MPS daemon holds a task to its SMs (its active
// thread percentage); the limits file then does not pace its time as
// well (compute_pct=100), else an SM-bound task at 25% would get 25% of
// 25%. The memory cap stays. (Issue 29, defect 3; the library's side,
// an unpaced process under such a file: interposer TestMPSLimitsNotPaced.)
func TestReserveInterposerMPSNotPacedTwice(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpushare-cuda.so")
	must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
	p, _, _ := newPlugin(t, fixtures.DGX1V100, `sharing = "mps"
mps {
  daemons = "node"
}
interposer {
  enabled = true
  library = "`+lib+`"
  state_dir = "`+filepath.Join(dir, "reservations")+`"
}`)
	res, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	must.Eq(t, "25", res.Envs[EnvMPSThreads])
	limits, err := os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), "\nmemory_bytes=4294967296\ncompute_pct=100\n")
	must.StrContains(t, string(limits), "\n# compute limited by MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n")
}

// Time-sliced sharing has nothing else limiting compute: the limits file
// paces the task to its share.
func TestReserveInterposerTimeslicePaced(t *testing.T) {
	p := interposerPluginWith(t, "timeslice", "")
	res, err := p.Reserve(shares(3, 10, 35))
	must.NoError(t, err)
	limits, err := os.ReadFile(filepath.Join(res.Envs[EnvLimits], "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), "\nmemory_bytes=4294967296\ncompute_pct=25\n")
	must.StrNotContains(t, string(limits), "MPS")
}
