package nomadattr

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestRoundTrip: a fixture node's groups survive the trip through Nomad's
// API type exactly.
func TestRoundTrip(t *testing.T) {
	for _, fx := range []string{fixtures.DGX1V100, fixtures.PCIe4GPU} {
		src, err := fixtures.FS.ReadFile(fx)
		must.NoError(t, err)
		st, err := fixture.Parse(fx, src)
		must.NoError(t, err)
		for _, g := range devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
			attrs := g.Attributes()
			must.Eq(t, attrs, FromAPI(ToAPI(attrs)))
			got, err := DecodeGroup(&api.NodeDeviceResource{Name: g.Model, Attributes: ToAPI(attrs)})
			must.NoError(t, err)
			must.Eq(t, g, *got)
		}
	}
}

func TestFromAPIKeepsTypes(t *testing.T) {
	f, b, s := 1.5, true, "x"
	got := FromAPI(map[string]*api.Attribute{"f": {FloatVal: &f, Unit: "MiB"}, "b": {BoolVal: &b}, "s": {StringVal: &s}, "nil": nil})
	must.MapLen(t, 3, got)
	must.Eq(t, "float 1.5 MiB", got["f"].GoString())
	must.Eq(t, "bool true", got["b"].GoString())
	_, err := devicefn.DecodeGroup("m", map[string]devicefn.Attr{devicefn.AttrSharesPerGPU: got["b"]})
	must.ErrorContains(t, err, "want an integer, got bool true")
}

// Device and MIGDevice give a group as Nomad returns it: its name, every
// share (of a shared instance, its own) or instance, and attributes that
// decode back to the group.
func TestDevice(t *testing.T) {
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := Device(&g)
		must.Eq(t, devicefn.Vendor+"/"+devicefn.DeviceType+"/"+g.Model, d.Vendor+"/"+d.Type+"/"+d.Name)
		must.SliceLen(t, len(g.GPUs)*g.GPUShares(), d.Instances)
		got, err := DecodeGroup(d)
		must.NoError(t, err)
		must.Eq(t, g.MIG, got.MIG)
	}
	for _, g := range devicefn.MIGGroups(&st.Inventory, nil) {
		d := MIGDevice(&g)
		must.Eq(t, devicefn.MIGDeviceType, d.Type)
		must.SliceLen(t, len(g.Instances), d.Instances)
		must.Eq(t, g.Instances[0].UUID, d.Instances[0].ID)
		got, err := DecodeMIGGroup(d)
		must.NoError(t, err)
		must.Eq(t, g.Profile, got.Profile)
	}
}
