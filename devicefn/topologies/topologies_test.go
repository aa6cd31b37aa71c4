package topologies

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

func TestEmbeddedTopologies(t *testing.T) {
	for _, name := range Names() {
		topo, err := Get(name)
		must.NoError(t, err, must.Sprint(name))
		must.Eq(t, len(topo.Links), len(topo.NUMA))
	}
	pcie := MustGet(PCIe2Socket)
	// The legacy SOC label reads as SYS.
	must.Eq(t, devicefn.LinkSYS, pcie.Links[0][2].Kind)
	must.Eq(t, []int{0, 0, 1, 1}, pcie.NUMA)
	dgx := MustGet(DGX1V100)
	must.Eq(t, "NV2", dgx.Links[0][3].String())
	_, err := Get("nope")
	must.Error(t, err)
}
