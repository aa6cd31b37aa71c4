package nomadattr

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The cell ranks a plugin fingerprints per GPU reach the scheduler's
// merged group (devicefn.Group.CellRanks, by GPU), from which the
// placement snapshot orders Nomad's pick; a node whose plugin has none
// decodes without them.
func TestDecodeGroupsCarriesCellRanks(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.DGX1V100)
	must.NoError(t, err)
	ranks := []int{0, 2, 3, 1, 4, 6, 7, 5}
	for _, ranked := range []bool{true, false} {
		var devs []*api.NodeDeviceResource
		for _, g := range devicefn.GPUGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
			if ranked {
				g.Ranked, g.CellRank = true, ranks[g.Index]
			}
			devs = append(devs, &api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: g.Name(), Attributes: ToAPI(g.Attributes())})
		}
		got, errs := DecodeGroups(devs)
		must.SliceEmpty(t, errs)
		must.SliceLen(t, 1, got)
		if ranked {
			must.Eq(t, ranks, got[0].CellRanks)
		} else {
			must.Nil(t, got[0].CellRanks)
		}
	}
}
