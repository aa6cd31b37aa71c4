package plugin

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/shoenig/test/must"
)

// statsNode is mixedNode with counters: the MIG GPU's power and
// temperature, its 3g instance's memory in use.
var statsNode = strings.NewReplacer(
	"  compute_capability = \"8.0\"\n  mig_device \"MIG-mig-3g\" {\n",
	"  compute_capability = \"8.0\"\n  power_watts = 250\n  temperature_c = 61\n  utilization_pct = 80\n  mig_device \"MIG-mig-3g\" {\n    memory_used_mib = 3000\n",
).Replace(mixedNode)

func statsGroup(t *testing.T, resp *device.StatsResponse, typ, name string) *device.DeviceGroupStats {
	t.Helper()
	for _, g := range resp.Groups {
		if g.Type == typ && g.Name == name {
			return g
		}
	}
	t.Fatalf("no stats of %s/%s", typ, name)
	return nil
}

// A whole MIG instance reports its own memory and its parent's power and
// temperature; its utilisation is not known (0, and said so).
func TestStatsMIGWhole(t *testing.T) {
	must.NotEq(t, mixedNode, statsNode)
	p := newPluginFile(t, statsNode)
	must.NoError(t, p.fingerprintOnce(t.Context()).Error)
	resp := p.statsOnce(t.Context())
	must.NoError(t, resp.Error)

	three := statsGroup(t, resp, "gpushare-mig", "3g.20gb").InstanceStats["MIG-mig-3g"]
	must.NotNil(t, three)
	must.Eq(t, int64(3000), *three.Summary.IntNumeratorVal)
	must.Eq(t, int64(19968), *three.Summary.IntDenominatorVal)
	a := three.Stats.Attributes
	must.Eq(t, int64(250), *a[StatPower].IntNumeratorVal)
	must.Eq(t, int64(61), *a[StatTemperature].IntNumeratorVal)
	must.Eq(t, int64(0), *a[StatUtilization].IntNumeratorVal) // not the parent's 80
	must.StrContains(t, a[StatUtilization].Desc, "not reported per MIG instance")

	one := statsGroup(t, resp, "gpushare-mig", "1g.5gb").InstanceStats["MIG-mig-1g"]
	must.Eq(t, int64(0), *one.Summary.IntNumeratorVal)
	must.Eq(t, int64(4864), *one.Summary.IntDenominatorVal)
	must.MapLen(t, 100, statsGroup(t, resp, "gpushare", "NVIDIA A100-SXM4-40GB").InstanceStats)
}

// Every share of a shared MIG instance reports the instance's stats.
func TestStatsMIGShared(t *testing.T) {
	p := sharedPlugin(t, statsNode, "")
	resp := p.statsOnce(t.Context())
	must.NoError(t, resp.Error)
	g := statsGroup(t, resp, "gpushare", a100MIG+"3g.20gb")
	must.MapLen(t, 42, g.InstanceStats)
	for _, id := range []string{"MIG-mig-3g:0", "MIG-mig-3g:41"} {
		s := g.InstanceStats[id]
		must.Eq(t, int64(3000), *s.Summary.IntNumeratorVal)
		must.Eq(t, int64(19968), *s.Summary.IntDenominatorVal)
		must.Eq(t, int64(61), *s.Stats.Attributes[StatTemperature].IntNumeratorVal)
		must.Eq(t, int64(0), *s.Stats.Attributes[StatUtilization].IntNumeratorVal)
	}
	must.MapLen(t, 14, statsGroup(t, resp, "gpushare", a100MIG+"1g.5gb").InstanceStats)
}
