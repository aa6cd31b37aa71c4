package interposer

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// The pacer's share comes from the read-only limits, never from the usage
// region the task can write (issue 29, defect 7): a process of the task
// that sets the region's pacer to "not paced" (share 1000 permille) is
// paced at the limits' 30% all the same. Before, a pacer already in the
// region kept the share written there: 99.8%.
func TestPacerShareFromLimitsNotRegion(t *testing.T) {
	b := build(t)
	env := gpuEnv(t)
	res := reservation(t, "compute_pct=30\n")
	args := []string{"kern:2000", "run:3000:500:3000"}
	w, _ := runOne(t, b, kernRun{run{limits: res, program: b.kdirect, mode: "direct", env: env}, args})
	must.Between(t, 28, w.share(), 32)

	// the region: magic, nslots, a pthread mutex (its size by
	// architecture), total, hiwater, pacer_ready, the pacer (share first),
	// ndev and a pad, the 8 devices (72 bytes each), the slots' charges
	// per device, then the slots, which end the file (src/gpushare.h)
	usage := filepath.Join(res, "usage")
	region, err := os.ReadFile(usage)
	must.NoError(t, err)
	const slots, pacerSize, devices = 1024 * 24, 40, 8 + 8*72 + 1024*8*8
	mutex := len(region) - (8 + 16 + pacerSize + devices + slots)
	must.Positive(t, mutex)
	// the pacer of the task's device 0 (a device's: UUID, bytes, pacer,
	// pacer_ready), which paces its launches (issue 29, defect 6)
	share := 8 + mutex + 16 + pacerSize + 8 + 16 + 8
	must.Eq(t, 1, binary.LittleEndian.Uint32(region[share+pacerSize:]), must.Sprint("pacer_ready"))
	must.Eq(t, 300, binary.LittleEndian.Uint32(region[share:]), must.Sprint("the pacer's share, permille"))
	binary.LittleEndian.PutUint32(region[share:], 1000)
	must.NoError(t, os.WriteFile(usage, region, 0o666))

	w, _ = runOne(t, b, kernRun{run{limits: res, program: b.kdirect, mode: "direct", env: env}, args})
	t.Logf("after the region's share was set to 1000 permille: %.2f%%", w.share())
	must.Between(t, 28, w.share(), 32)
}
