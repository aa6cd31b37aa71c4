package nomadattr

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fuzzFixtures are the inventories the attribute fuzzers start from.
var fuzzFixtures = []string{fixtures.DGX1V100, fixtures.PCIe4GPU, fixtures.HGXH100}

// fuzzAttrs returns the API attributes of the first group of fixture
// fx%len(fuzzFixtures), edited by lines "key=<type><value>": type i an
// integer, f a float, s a string, b a bool, u an integer with unit MiB,
// n a nil attribute, - deletes the key, and x sets every value at once.
func fuzzAttrs(t *testing.T, fx uint8, edits string) map[string]*api.Attribute {
	name := fuzzFixtures[int(fx)%len(fuzzFixtures)]
	src, err := fixtures.FS.ReadFile(name)
	must.NoError(t, err)
	st, err := fixture.Parse(name, src)
	must.NoError(t, err)
	out := ToAPI(devicefn.Groups(&st.Inventory, 100, devicefn.SharingMPS, nil)[0].Attributes())
	for line := range strings.SplitSeq(edits, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || v == "" {
			continue
		}
		typ, val := v[0], v[1:]
		i, _ := strconv.ParseInt(val, 10, 64)
		fl, _ := strconv.ParseFloat(val, 64)
		b := val == "1" || val == "true"
		switch typ {
		case 'i':
			out[k] = &api.Attribute{IntVal: &i}
		case 'u':
			out[k] = &api.Attribute{IntVal: &i, Unit: "MiB"}
		case 'f':
			out[k] = &api.Attribute{FloatVal: &fl}
		case 's':
			out[k] = &api.Attribute{StringVal: &val}
		case 'b':
			out[k] = &api.Attribute{BoolVal: &b}
		case 'x':
			out[k] = &api.Attribute{IntVal: &i, FloatVal: &fl, StringVal: &val, BoolVal: &b, Unit: val}
		case 'n':
			out[k] = nil
		case '-':
			delete(out, k)
		}
	}
	return out
}

// AttrSeeds are edits of realistic and nasty attributes, shared with the
// fuzzers of package model through copies of these strings.
var attrSeeds = []string{
	"",
	"gpus=i0",
	"gpus=i-1",
	"gpus=i4097",
	"gpus=i9223372036854775807",
	"gpus=i9\ngpu8.uuid=sGPU-x",
	"gpus=s8",
	"gpus=n",
	"gpus=-",
	"shares_per_gpu=i0",
	"shares_per_gpu=i1001",
	"shares_per_gpu=i-9223372036854775808",
	"shares_per_gpu=f100",
	"shares_per_gpu=x100",
	"memory=i-1",
	"memory=u-9223372036854775808",
	"gpu0.links=s",
	"gpu0.links=s,,,",
	"gpu0.links=sX,NV2,NV2,NV1",
	"gpu0.links=sNV99999999999999999999,NV2",
	"gpu0.links=i1",
	"gpu1.links=n",
	"gpu0.uuid=s",
	"gpu1.uuid=sGPU-d1000000-0000-4000-8000-000000000000",
	"gpu0.uuid=sGPU-a:0,GPU-b",
	"gpu0.numa_node=i-9223372036854775808",
	"gpu0.numa_node=s0",
	"gpu0.pci_bus_id=b1",
	"gpus=i1\nshares_per_gpu=i1",
	"gpus=i2\ngpu0.links=sX,SYS\ngpu1.links=sSYS,X",
	"gpus=i2\ngpu0.links=sX,SYS\ngpu1.links=sNV1,X",
	"sharing=sexclusive\ndriver_version=i1",
	"cuda_version=-\ncompute_capability=n",
}

// FuzzDecodeGroup: attributes as Nomad's API returns them, edited
// arbitrarily, never panic FromAPI or DecodeGroup; a refusal wraps
// devicefn.ErrBadAttributes, and a group it accepts encodes back to
// attributes that decode to the same group.
func FuzzDecodeGroup(f *testing.F) {
	for i, s := range attrSeeds {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, fx uint8, edits string) {
		attrs := fuzzAttrs(t, fx, edits)
		_ = FromAPI(attrs)
		g, err := DecodeGroup(&api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: "m", Attributes: attrs})
		if err != nil {
			if !errors.Is(err, devicefn.ErrBadAttributes) {
				t.Fatalf("error %q does not wrap ErrBadAttributes", err)
			}
			return
		}
		again, err := DecodeGroup(&api.NodeDeviceResource{Name: "m", Attributes: ToAPI(g.Attributes())})
		if err != nil {
			t.Fatalf("an accepted group does not decode again: %v", err)
		}
		must.Eq(t, g, again)
	})
}
