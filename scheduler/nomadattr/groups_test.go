package nomadattr

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A node whose plugin offers each GPU as a group of its own decodes to the
// same per-model groups as one with today's contract, marked PerGPU; its
// shared MIG groups and other devices are read as before.
func TestDecodeGroupsMergesPerGPU(t *testing.T) {
	for _, fx := range []string{fixtures.DGX1V100, fixtures.PCIe4GPU, fixtures.A100MIG} {
		st, err := fixture.ParseShipped(fx)
		must.NoError(t, err)
		inv := &st.Inventory
		var devs []*api.NodeDeviceResource
		for _, g := range devicefn.GPUGroups(inv, 100, devicefn.SharingMPS, nil) {
			devs = append(devs, &api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: g.Name(), Attributes: ToAPI(g.Attributes())})
		}
		shared := devicefn.SharedMIGGroups(inv, 100, devicefn.SharingMPS, nil)
		for i := range shared {
			devs = append(devs, Device(&shared[i]))
		}
		devs = append(devs, nil, &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: "other"})
		got, errs := DecodeGroups(devs)
		must.SliceEmpty(t, errs)
		want := devicefn.Groups(inv, 100, devicefn.SharingMPS, nil)
		for i := range want {
			want[i].PerGPU = true
		}
		must.SliceLen(t, len(shared)+len(want), got)
		for i := range shared { // the decoded instance has no GPU instance ID
			must.Eq(t, shared[i].Model, got[i].Model)
			must.NotNil(t, got[i].MIG)
		}
		must.Eq(t, want, got[len(shared):], must.Sprint(fx))

		// today's contract decodes as DecodeGroup does
		var today []*api.NodeDeviceResource
		for _, g := range devicefn.Groups(inv, 100, devicefn.SharingMPS, nil) {
			today = append(today, Device(&g))
		}
		got, errs = DecodeGroups(today)
		must.SliceEmpty(t, errs)
		must.Eq(t, len(today), len(got))
		for i, g := range devicefn.Groups(inv, 100, devicefn.SharingMPS, nil) {
			must.Eq(t, g, got[i])
		}
	}
}

func TestGPUDevicesRoundTrip(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.HGXH100)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil)[0]
	devs := GPUDevices(&g)
	must.SliceLen(t, len(g.GPUs), devs)
	must.Eq(t, g.Model+" GPU 3", devs[3].Name)
	got, errs := DecodeGroups(devs)
	must.SliceEmpty(t, errs)
	g.PerGPU = true
	must.Eq(t, []devicefn.Group{g}, got)
}

// A per-GPU group that does not decode is left out, with an error; the
// other GPUs of its model are merged without it.
func TestDecodeGroupsReportsBadGroups(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.PCIe4GPU)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil)[0]
	devs := GPUDevices(&g)
	devs[1].Name = "renamed"
	got, errs := DecodeGroups(devs)
	must.SliceLen(t, 1, errs)
	must.ErrorIs(t, errs[0], devicefn.ErrBadAttributes)
	must.ErrorContains(t, errs[0], `"renamed"`)
	must.SliceLen(t, 1, got)
	must.SliceLen(t, 3, got[0].GPUs)
}
