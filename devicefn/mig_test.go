package devicefn

import (
	"testing"

	"github.com/shoenig/test/must"
)

func migInventory() *Inventory {
	nv := Link{Kind: LinkNVLink, NVLinks: 12}
	self := Link{Kind: LinkSelf}
	return &Inventory{
		DriverVersion: "550.54.15", CUDAVersion: "12.4",
		GPUs: []GPU{
			{Index: 0, UUID: "GPU-0", Model: "A100", MemoryMiB: 40960, PCIBusID: "00000000:07:00.0", NUMANode: 3, ComputeCapability: "8.0", MIG: true,
				MIGDevices: []MIGDevice{
					{UUID: "MIG-0b", Profile: "1g.5gb", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, GPUInstanceID: 13},
					{UUID: "MIG-0a", Profile: "3g.20gb", MemoryMiB: 19968, Slices: 3, ParentSlices: 7, GPUInstanceID: 2},
					{UUID: "MIG-0c", Profile: "1g.5gb", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, GPUInstanceID: 9},
				}},
			{Index: 1, UUID: "GPU-1", Model: "A100", MemoryMiB: 40960, PCIBusID: "00000000:0F:00.0", NUMANode: 3, ComputeCapability: "8.0"},
		},
		Links: Matrix{{self, nv}, {nv, self}},
	}
}

func TestMIGGroups(t *testing.T) {
	inv := migInventory()
	must.NoError(t, inv.Validate())

	// the MIG GPU is not shared as a whole, and its instances form one
	// group per profile, ordered by parent and GPU instance
	shares := Groups(inv, 100, SharingMPS, nil)
	must.Len(t, 1, shares)
	must.Eq(t, "GPU-1", shares[0].GPUs[0].UUID)

	groups := MIGGroups(inv, nil)
	must.Len(t, 2, groups)
	must.Eq(t, "1g.5gb", groups[0].Profile)
	must.Eq(t, []string{"MIG-0c", "MIG-0b"}, []string{groups[0].Instances[0].UUID, groups[0].Instances[1].UUID})
	must.Eq(t, "3g.20gb", groups[1].Profile)
	must.Eq(t, 3.0/7, groups[1].Instances[0].Fraction())

	attrs := groups[1].Attributes()
	str := func(name string) string { v, _ := attrs[name].GetString(); return v }
	num := func(name string) int64 { v, _ := attrs[name].GetInt(); return v }
	must.Eq(t, "3g.20gb", str(AttrMIGProfile))
	must.Eq(t, SharingMIG, str(AttrSharing))
	must.Eq(t, 19968, num(AttrMemory))
	must.Eq(t, 3, num(AttrMIGSlices))
	must.Eq(t, 7, num(AttrMIGParentSlices))
	must.Eq(t, 1, num(AttrMIGInstances))
	must.Eq(t, "MIG-0a", str("mig0.uuid"))
	must.Eq(t, "GPU-0", str("mig0.parent_uuid"))
	must.Eq(t, "00000000:07:00.0", str("mig0.parent_pci_bus_id"))
	must.Eq(t, 3, num("mig0.numa_node"))
	must.Eq(t, "X,NV12", str("mig0.parent_links"))
	must.Eq(t, 2, num("mig0.gpu_instance_id"))
	for name, a := range attrs {
		must.NoError(t, a.Validate(), must.Sprint(name))
	}

	// ignored GPUs give no instances, ignored instances are left out
	must.Len(t, 0, MIGGroups(inv, map[string]bool{"GPU-0": true}))
	groups = MIGGroups(inv, map[string]bool{"MIG-0c": true, "MIG-0a": true})
	must.Len(t, 1, groups)
	must.Len(t, 1, groups[0].Instances)
	must.Eq(t, "MIG-0b", groups[0].Instances[0].UUID)
}

func TestMIGProfileName(t *testing.T) {
	must.Eq(t, "3g.20gb", MIGProfileName(3, 3, 20, ""))
	must.Eq(t, "1c.3g.20gb", MIGProfileName(1, 3, 20, ""))
	must.Eq(t, "1g.5gb+me", MIGProfileName(1, 1, 5, "+me"))
}

func TestValidateMIG(t *testing.T) {
	inv := migInventory()
	inv.GPUs[1].MIGDevices = []MIGDevice{{UUID: "MIG-1", Profile: "7g.40gb", MemoryMiB: 40192, Slices: 7, ParentSlices: 7}}
	must.ErrorContains(t, inv.Validate(), "has MIG devices but MIG mode off")
	inv = migInventory()
	inv.GPUs[0].MIGDevices[1].UUID = "MIG-0b"
	must.ErrorContains(t, inv.Validate(), `MIG device "MIG-0b" has the UUID`)
}

func TestDecodeMIGGroupRoundTrip(t *testing.T) {
	for _, g := range MIGGroups(migInventory(), nil) {
		attrs := g.Attributes()
		back, err := DecodeMIGGroup(g.Profile, attrs)
		must.NoError(t, err)
		must.Eq(t, attrs, back.Attributes())
		must.Eq(t, g.Instances[0].Parent.UUID, back.Instances[0].Parent.UUID)
	}
}

func TestDecodeMIGGroupErrors(t *testing.T) {
	g := MIGGroups(migInventory(), nil)[1]
	attrs := g.Attributes()
	_, err := DecodeMIGGroup("2g.10gb", attrs)
	must.ErrorIs(t, err, ErrBadAttributes)
	must.ErrorContains(t, err, `"3g.20gb" in a device group named "2g.10gb"`)

	delete(attrs, "mig0.parent_uuid")
	_, err = DecodeMIGGroup("3g.20gb", attrs)
	must.ErrorContains(t, err, `attribute "mig0.parent_uuid": missing`)

	attrs = g.Attributes()
	attrs["mig0.uuid"] = StringAttr("GPU-not-mig")
	_, err = DecodeMIGGroup("3g.20gb", attrs)
	must.ErrorContains(t, err, "does not start with MIG-")
}
