package devicefn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// MIGDeviceType is the device type of MIG instances: a job asks for
// "nvidia/gpushare-mig/<profile>" (or "nvidia/gpushare-mig" with a
// constraint on ${device.attr.profile}). It is a type of its own because an
// instance is a whole MIG device, not a share: count = 1 is one instance.
const MIGDeviceType = "gpushare-mig"

// SharingMIG is GPUSHARE_SHARING for a task that holds a MIG instance.
const SharingMIG = "mig"

// DefaultMIGSlices is the compute slices of a MIG-capable GPU (A100, H100,
// H200, B200: seven), used when a source cannot tell.
const DefaultMIGSlices = 7

// MIGDevice is one MIG device of a MIG-enabled GPU: a compute instance
// inside a GPU instance, which CUDA sees as a GPU of its own.
type MIGDevice struct {
	// UUID is the MIG device's UUID ("MIG-..."), the Nomad instance ID.
	UUID string
	// Profile is the profile as nvidia-smi names it: "3g.20gb", or
	// "1c.3g.20gb" for a compute instance smaller than its GPU instance.
	Profile string
	// MemoryMiB is the instance's memory.
	MemoryMiB uint64
	// Slices is the compute slices the instance's compute instance has.
	Slices int
	// ParentSlices is the compute slices of the whole parent GPU (7 on
	// A100 and H100); Slices/ParentSlices is the instance's fraction.
	ParentSlices int
	// GPUInstanceID and ComputeInstanceID locate the instance on its GPU.
	GPUInstanceID     int
	ComputeInstanceID int
	// CapMinors are the minors of the /dev/nvidia-caps/nvidia-cap<N> nodes
	// that give access to the GPU instance and the compute instance; empty
	// when the source cannot tell (fixtures, drivers without them).
	CapMinors []int
}

// Fraction is the instance's share of its parent's compute slices.
func (m MIGDevice) Fraction() float64 {
	if m.ParentSlices <= 0 {
		return 0
	}
	return float64(m.Slices) / float64(m.ParentSlices)
}

// Validate checks what the device contract needs of a MIG device.
func (m MIGDevice) Validate() error {
	switch {
	case !strings.HasPrefix(m.UUID, "MIG-"):
		return fmt.Errorf("MIG device UUID %q does not start with MIG-", m.UUID)
	case strings.ContainsAny(m.UUID, ",: \t"):
		return fmt.Errorf("MIG device UUID %q contains a comma, colon or space", m.UUID)
	case m.Profile == "" || strings.ContainsAny(m.Profile, "/ \t,"):
		return fmt.Errorf("MIG device %s: profile %q is empty or holds a slash, comma or space", m.UUID, m.Profile)
	case m.Slices < 1 || m.ParentSlices < m.Slices:
		return fmt.Errorf("MIG device %s: %d slices of %d is not a part of a GPU", m.UUID, m.Slices, m.ParentSlices)
	}
	return nil
}

// MIGProfileName names a profile as nvidia-smi does: "<g>g.<mem>gb" for a
// compute instance that fills its GPU instance, "<c>c.<g>g.<mem>gb" for a
// smaller one. memGB is the profile's memory in nvidia-smi's rounded GB.
func MIGProfileName(ciSlices, giSlices int, memGB uint64, suffix string) string {
	name := strconv.Itoa(giSlices) + "g." + strconv.FormatUint(memGB, 10) + "gb" + suffix
	if ciSlices > 0 && ciSlices < giSlices {
		name = strconv.Itoa(ciSlices) + "c." + name
	}
	return name
}

// Attribute names of a MIG device group; per-instance names are
// "mig<i>.<suffix>".
const (
	AttrMIGProfile      = "profile"
	AttrMIGInstances    = "instances"
	AttrMIGSlices       = "slices"
	AttrMIGParentSlices = "parent_slices"

	attrMIGUUID          = "uuid"
	attrMIGModel         = "model"
	attrMIGParentUUID    = "parent_uuid"
	attrMIGParentIndex   = "parent_index"
	attrMIGParentPCI     = "parent_pci_bus_id"
	attrMIGParentNUMA    = "numa_node"
	attrMIGParentLinks   = "parent_links"
	attrMIGGPUInstance   = "gpu_instance_id"
	attrMIGComputeInstID = "compute_instance_id"
	attrMIGParentProfs   = "parent_profiles"
)

// MIGGroup is one Nomad device group of MIG instances: the instances of
// one profile on one node, whatever their parent GPUs.
type MIGGroup struct {
	Profile           string
	DriverVersion     string
	CUDAVersion       string
	ComputeCapability string
	// MemoryMiB is the memory of one instance (the smallest, should they
	// differ), Slices and ParentSlices its compute slices and its parent's.
	MemoryMiB    uint64
	Slices       int
	ParentSlices int
	// Instances in parent index order, then GPU instance ID.
	Instances []MIGInstance
}

// MIGInstance is one MIG device of a group, with its parent GPU.
type MIGInstance struct {
	MIGDevice
	// Parent is the parent GPU; ParentLinks its row of the node's link
	// matrix (every GPU of the node, in NVML index order).
	Parent      GPU
	ParentLinks []Link
}

// MIGGroups returns one group per MIG profile of the inventory's
// MIG-enabled GPUs, sorted by profile. GPUs and MIG devices listed in skip
// (by UUID) are left out.
func MIGGroups(inv *Inventory, skip map[string]bool) []MIGGroup {
	byProfile := map[string]*MIGGroup{}
	for i, g := range inv.GPUs {
		if !g.MIG || skip[g.UUID] {
			continue
		}
		var row []Link
		if i < len(inv.Links) {
			row = inv.Links[i]
		}
		for _, m := range g.MIGDevices {
			if skip[m.UUID] {
				continue
			}
			grp := byProfile[m.Profile]
			if grp == nil {
				grp = &MIGGroup{
					Profile: m.Profile, DriverVersion: inv.DriverVersion, CUDAVersion: inv.CUDAVersion,
					ComputeCapability: g.ComputeCapability, MemoryMiB: m.MemoryMiB,
					Slices: m.Slices, ParentSlices: m.ParentSlices,
				}
				byProfile[m.Profile] = grp
			}
			grp.MemoryMiB = min(grp.MemoryMiB, m.MemoryMiB)
			grp.Instances = append(grp.Instances, MIGInstance{MIGDevice: m, Parent: g, ParentLinks: row})
		}
	}
	for _, g := range byProfile {
		slices.SortStableFunc(g.Instances, func(a, b MIGInstance) int {
			return instanceOrder(a.Parent.Index, a.GPUInstanceID, b.Parent.Index, b.GPUInstanceID)
		})
	}
	return byKey(byProfile)
}

// instanceOrder orders MIG instances by their parent's index, then their
// GPU instance ID.
func instanceOrder(parentA, giA, parentB, giB int) int {
	return cmp.Or(cmp.Compare(parentA, parentB), cmp.Compare(giA, giB))
}

// byKey returns the groups of m in the order of their keys.
func byKey[G any](m map[string]*G) []G {
	out := make([]G, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, *m[k])
	}
	return out
}

func migAttr(i int, suffix string) string { return "mig" + strconv.Itoa(i) + "." + suffix }

// Attributes encodes the group as Nomad device-group attributes.
func (g *MIGGroup) Attributes() map[string]Attr {
	attrs := map[string]Attr{
		AttrMIGProfile:        StringAttr(g.Profile),
		AttrMIGInstances:      IntAttr(int64(len(g.Instances)), ""),
		AttrMemory:            IntAttr(int64(g.MemoryMiB), UnitMiB),
		AttrMIGSlices:         IntAttr(int64(g.Slices), ""),
		AttrMIGParentSlices:   IntAttr(int64(g.ParentSlices), ""),
		AttrSharing:           StringAttr(SharingMIG),
		AttrDriverVersion:     StringAttr(g.DriverVersion),
		AttrCUDAVersion:       StringAttr(g.CUDAVersion),
		AttrComputeCapability: StringAttr(g.ComputeCapability),
	}
	for i, m := range g.Instances {
		attrs[migAttr(i, attrMIGUUID)] = StringAttr(m.UUID)
		attrs[migAttr(i, attrMIGModel)] = StringAttr(m.Parent.Model)
		attrs[migAttr(i, attrMIGParentUUID)] = StringAttr(m.Parent.UUID)
		attrs[migAttr(i, attrMIGParentIndex)] = IntAttr(int64(m.Parent.Index), "")
		attrs[migAttr(i, attrMIGParentPCI)] = StringAttr(m.Parent.PCIBusID)
		attrs[migAttr(i, attrMIGParentNUMA)] = IntAttr(int64(m.Parent.NUMANode), "")
		attrs[migAttr(i, attrMIGParentLinks)] = StringAttr(EncodeRow(m.ParentLinks))
		attrs[migAttr(i, attrMIGGPUInstance)] = IntAttr(int64(m.GPUInstanceID), "")
		attrs[migAttr(i, attrMIGComputeInstID)] = IntAttr(int64(m.ComputeInstanceID), "")
		attrs[migAttr(i, attrMIGParentProfs)] = StringAttr(EncodeMIGProfiles(m.Parent.MIGProfiles))
	}
	return attrs
}

// DecodeMIGGroup rebuilds a MIGGroup from the attributes of the device
// group named profile, as the scheduler reads them back from Nomad. Its
// Attributes are the attributes decoded: each instance takes the group's
// memory and slices (one profile has one size), and what is not encoded
// (the parent's memory and device minor, /dev/nvidia-caps minors) is left
// unknown.
func DecodeMIGGroup(profile string, attrs map[string]Attr) (*MIGGroup, error) {
	d := decoder{attrs: attrs}
	g := &MIGGroup{
		Profile:           d.str(AttrMIGProfile),
		DriverVersion:     d.str(AttrDriverVersion),
		CUDAVersion:       d.str(AttrCUDAVersion),
		ComputeCapability: d.str(AttrComputeCapability),
		MemoryMiB:         uint64(d.int(AttrMemory)),
		Slices:            int(d.int(AttrMIGSlices)),
		ParentSlices:      int(d.int(AttrMIGParentSlices)),
	}
	if d.err == nil && g.Profile != profile {
		d.fail(AttrMIGProfile, fmt.Errorf("%q in a device group named %q", g.Profile, profile))
	}
	n := int(d.int(AttrMIGInstances))
	if d.err == nil && (n < 0 || n > 4096) {
		d.fail(AttrMIGInstances, fmt.Errorf("%d instances is out of range", n))
	}
	for i := 0; i < n && d.err == nil; i++ {
		m := MIGInstance{
			MIGDevice: MIGDevice{
				UUID: d.str(migAttr(i, attrMIGUUID)), Profile: g.Profile, MemoryMiB: g.MemoryMiB,
				Slices: g.Slices, ParentSlices: g.ParentSlices,
				GPUInstanceID:     int(d.int(migAttr(i, attrMIGGPUInstance))),
				ComputeInstanceID: int(d.int(migAttr(i, attrMIGComputeInstID))),
			},
			Parent: GPU{
				Index: int(d.int(migAttr(i, attrMIGParentIndex))), UUID: d.str(migAttr(i, attrMIGParentUUID)),
				Model: d.str(migAttr(i, attrMIGModel)), PCIBusID: d.str(migAttr(i, attrMIGParentPCI)),
				NUMANode: int(d.int(migAttr(i, attrMIGParentNUMA))), ComputeCapability: g.ComputeCapability,
				Minor: -1, MIG: true,
			},
		}
		if links := d.str(migAttr(i, attrMIGParentLinks)); d.err == nil {
			row, err := DecodeRow(links)
			if err != nil {
				d.fail(migAttr(i, attrMIGParentLinks), err)
			}
			m.ParentLinks = row
		}
		if d.err == nil {
			// optional: a plugin before mig profiles were published has none
			if a, ok := attrs[migAttr(i, attrMIGParentProfs)]; ok {
				v, _ := a.GetString()
				ps, err := DecodeMIGProfiles(v)
				if err != nil {
					d.fail(migAttr(i, attrMIGParentProfs), err)
				}
				m.Parent.MIGProfiles = ps
			}
		}
		if d.err == nil {
			if err := m.MIGDevice.Validate(); err != nil {
				d.fail(migAttr(i, attrMIGUUID), err)
			}
		}
		g.Instances = append(g.Instances, m)
	}
	if d.err != nil {
		return nil, d.err
	}
	return g, nil
}

// MIGLayouter is implemented by sources that can change the MIG instances
// of a GPU (devicefn/nvml); the plugin applies its mig layouts through it.
type MIGLayouter interface {
	// ApplyMIGLayout makes the instances of the MIG-enabled GPU uuid be
	// profiles (a compute instance filling each GPU instance). A GPU that
	// already has them is left alone; one that runs processes is left
	// alone with an error wrapping ErrGPUBusy.
	ApplyMIGLayout(ctx context.Context, uuid string, profiles []string) error
}

// Errors of ApplyMIGLayout.
var (
	ErrGPUBusy           = errors.New("GPU has running processes")
	ErrUnknownMIGProfile = errors.New("unknown MIG profile")
	ErrMIGModeOff        = errors.New("MIG mode is off")
)

// SameProfiles reports whether a GPU's MIG devices are the profiles given,
// in any order.
func SameProfiles(devs []MIGDevice, profiles []string) bool {
	if len(devs) != len(profiles) {
		return false
	}
	have := make([]string, len(devs))
	for i, d := range devs {
		have[i] = d.Profile
	}
	want := append([]string(nil), profiles...)
	sort.Strings(have)
	sort.Strings(want)
	for i := range have {
		if have[i] != want[i] {
			return false
		}
	}
	return true
}
