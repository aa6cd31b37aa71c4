package miglayout

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

func TestSummaryAndApply(t *testing.T) {
	seven := GPU{Index: 1, Mode: devicefn.MIGWhole, SharesPerGPU: 100, Instances: []Instance{{Profile: "7g.40gb", Slices: 7}}}
	r := one(t, a100Model(mixedA100(devicefn.MIGWhole), seven), []Demand{shares(14, 1)}, DefaultOptions)
	must.Eq(t, "MIG layout for NVIDIA A100-SXM4-40GB: now GPU0 3g.20gb+2g.10gb+1g.5gb+1g.5gb, GPU1 7g.40gb, recommended 1g.5gb ×7: "+
		"saves 126 shares of expected fragmentation (130 → 4)", r.Summary())
	must.StrContains(t, r.Apply(), "its GPUs are idle: the plugin applies it at its next fingerprint")

	r = one(t, a100Model(mixedA100(devicefn.MIGShared)), nil, DefaultOptions)
	must.Eq(t, "MIG layout for NVIDIA A100-SXM4-40GB: now 3g.20gb+2g.10gb+1g.5gb+1g.5gb, no recommendation: "+
		"no fractional demand for this model: the layout is left as it is", r.Summary())
	must.Eq(t, "", r.Apply())
	must.Eq(t, "no instance", Format(nil))
	must.Eq(t, "7g.40gb", Format([]string{"7g.40gb"}))
}
