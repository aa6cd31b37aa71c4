package devicefn

import (
	"testing"

	"github.com/shoenig/test/must"
)

var a100Profiles = []MIGProfile{{"1g.5gb", 1, 4864}, {"2g.10gb", 2, 9856}, {"3g.20gb", 3, 19968}, {"4g.20gb", 4, 19968}, {"7g.40gb", 7, 40192}}

// Shared MIG instances are GPUs of nvidia/gpushare with fewer shares, one
// group per parent model and profile, and decode back exactly.
func TestSharedMIGGroupsRoundTrip(t *testing.T) {
	inv := migInventory()
	inv.GPUs[0].MIGProfiles = a100Profiles
	groups := SharedMIGGroups(inv, 100, SharingMPS, nil)
	must.Len(t, 2, groups)
	must.Eq(t, "A100 MIG 1g.5gb", groups[0].Model)
	must.Eq(t, []string{"MIG-0c", "MIG-0b"}, []string{groups[0].GPUs[0].UUID, groups[0].GPUs[1].UUID})
	must.Eq(t, 14, groups[0].GPUShares())
	must.Eq(t, 42, groups[1].GPUShares())
	must.Eq(t, 19968/42, groups[1].ShareMemoryMiB())
	must.Eq(t, "GPU-0", groups[1].GPUs[0].Parent)

	for _, g := range groups {
		attrs := g.Attributes()
		back, err := DecodeGroup(g.Model, attrs)
		must.NoError(t, err)
		must.Eq(t, g.MIG, back.MIG)
		for i := range g.GPUs {
			g.GPUs[i].instanceID = 0
		}
		must.Eq(t, g.GPUs, back.GPUs)
	}
	// a whole GPU's group has no MIG part
	whole := Groups(inv, 100, SharingMPS, nil)
	back, err := DecodeGroup(whole[0].Model, whole[0].Attributes())
	must.NoError(t, err)
	must.Nil(t, back.MIG)
	must.Eq(t, 100, back.GPUShares())
}

func TestSharedMIGGroupRefusesNonsense(t *testing.T) {
	inv := migInventory()
	g := SharedMIGGroups(inv, 100, SharingMPS, nil)[1]
	for name, bad := range map[string]Attr{
		AttrMIGGroupShares:  IntAttr(101, ""),
		AttrMIGGroupSlices:  IntAttr(8, ""),
		AttrMIGGroupProfile: StringAttr("2g.10gb"),
		"gpu0.mig_profiles": StringAttr("1g:x:1"),
		"gpu0.mig_parent":   StringAttr(""),
	} {
		attrs := g.Attributes()
		attrs[name] = bad
		_, err := DecodeGroup(g.Model, attrs)
		must.ErrorIs(t, err, ErrBadAttributes, must.Sprint(name))
	}
}

func TestMIGProfilesEncoding(t *testing.T) {
	back, err := DecodeMIGProfiles(EncodeMIGProfiles(a100Profiles))
	must.NoError(t, err)
	must.Eq(t, a100Profiles, back)
	for _, bad := range []string{"1g.5gb", "1g.5gb:0:10", ":1:2", "a:1:-3"} {
		_, err := DecodeMIGProfiles(bad)
		must.Error(t, err, must.Sprint(bad))
	}
	must.Eq(t, 42, MIGShares(3, 7, 100))
	must.Eq(t, 100, MIGShares(7, 7, 100))
	must.Eq(t, 0, MIGShares(1, 0, 100))
}

// The whole-instance groups carry each parent's profiles too, and a group
// from a plugin that published none still decodes.
func TestMIGGroupParentProfiles(t *testing.T) {
	inv := migInventory()
	inv.GPUs[0].MIGProfiles = a100Profiles
	g := MIGGroups(inv, nil)[1]
	attrs := g.Attributes()
	back, err := DecodeMIGGroup(g.Profile, attrs)
	must.NoError(t, err)
	must.Eq(t, a100Profiles, back.Instances[0].Parent.MIGProfiles)
	delete(attrs, "mig0.parent_profiles")
	back, err = DecodeMIGGroup(g.Profile, attrs)
	must.NoError(t, err)
	must.SliceEmpty(t, back.Instances[0].Parent.MIGProfiles)
}
