package plugin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// A share held by a task's process reports that process's SM
// utilisation; the GPU's other shares report only the GPU's counters.
func TestStatsProcessSM(t *testing.T) {
	const g = "GPU-h1000000-0000-4000-8000-000000000002"
	procRoot := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(procRoot, "42"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(procRoot, "42", "environ"),
		[]byte(EnvShareIDs+"="+g+":10-19\x00"+fixture.EnvSMUtil+"=37\x00"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(procRoot, "42", "stat"), // as Linux lays it out
		[]byte("42 (python3) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 4242 1000 10"), 0o644))
	path, err := fixtures.WriteTo(fixtures.HGXH100, t.TempDir())
	must.NoError(t, err)
	p := New(hclog.NewNullLogger(), func(cfg *Config, logger hclog.Logger) (devicefn.Source, error) {
		return fixture.Open(cfg.Fixture, logger, nil, fixture.WithProcesses(devicefn.ProcFS{Root: procRoot}, 0))
	})
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "fixture = \""+path+"\"")}))
	fp, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	next(t, fp)
	ch, err := p.Stats(t.Context(), 50*time.Millisecond)
	must.NoError(t, err)
	var resp *device.StatsResponse
	select {
	case resp = <-ch:
	case <-time.After(time.Minute): // liveness only
		t.Fatal("no stats")
	}
	stats := resp.Groups[0].InstanceStats
	for k := 10; k <= 19; k++ {
		v := stats[devicefn.ShareID{UUID: g, Index: k}.String()].Stats.Attributes[StatProcessSM]
		must.NotNil(t, v)
		must.Eq(t, int64(37), *v.IntNumeratorVal)
	}
	for _, id := range []string{g + ":9", g + ":20", "GPU-h1000000-0000-4000-8000-000000000003:15"} {
		must.MapNotContainsKey(t, stats[id].Stats.Attributes, StatProcessSM)
		must.MapContainsKey(t, stats[id].Stats.Attributes, StatUtilization)
	}
	// the GPU counts its process's work
	must.Eq(t, int64(37), *stats[g+":0"].Stats.Attributes[StatUtilization].IntNumeratorVal)
}
