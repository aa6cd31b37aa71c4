package devicefn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MIG instances shared further (the plugin's mig_instances = "shared"):
// each MIG device is offered as a GPU of the nvidia/gpushare device type,
// in a group of its own per parent model and profile named
// "<model> MIG <profile>" (MIGGroupName), with MIGShares(...) shares of
// shares_per_gpu each: a share stays 1/shares_per_gpu of the parent GPU, so
// a request means the same on a whole GPU and on an instance. Share IDs are
// "<MIG UUID>:<k>". The placement core treats each instance as a GPU of
// that many shares that never serves a whole-GPU request.

// Instance modes of the plugin's mig_instances option.
const (
	// MIGWhole offers each instance whole, as nvidia/gpushare-mig/<profile>.
	MIGWhole = "whole"
	// MIGShared offers each instance as shares of nvidia/gpushare.
	MIGShared = "shared"
)

// MIGGroupInfix joins a parent model and a profile into the device name of
// a group of shared MIG instances.
const MIGGroupInfix = " MIG "

// MIGGroupName is the device name of the shared instances of one profile
// on GPUs of one model: "NVIDIA A100-SXM4-40GB MIG 3g.20gb".
func MIGGroupName(model, profile string) string { return model + MIGGroupInfix + profile }

// MIGShares is the shares a shared instance offers: its part of the
// parent's compute slices in shares of the parent, rounded down (a 3g of
// 7 slices at 100 shares per GPU: 42).
func MIGShares(slices, parentSlices, sharesPerGPU int) int {
	if parentSlices <= 0 || slices <= 0 {
		return 0
	}
	return slices * sharesPerGPU / parentSlices
}

// MIGProfile is one GPU instance profile a MIG-capable GPU offers.
type MIGProfile struct {
	// Name as nvidia-smi names it ("3g.20gb").
	Name string
	// Slices is the compute slices of the profile.
	Slices int
	// MemoryMiB is the memory of one instance of the profile.
	MemoryMiB uint64
}

// EncodeMIGProfiles writes profiles as "<name>:<slices>:<MiB>,...".
func EncodeMIGProfiles(ps []MIGProfile) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.Name + ":" + strconv.Itoa(p.Slices) + ":" + strconv.FormatUint(p.MemoryMiB, 10)
	}
	return strings.Join(parts, ",")
}

// DecodeMIGProfiles reads what EncodeMIGProfiles wrote; "" is no profile.
func DecodeMIGProfiles(s string) ([]MIGProfile, error) {
	if s == "" {
		return nil, nil
	}
	var out []MIGProfile
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("MIG profile %q: want <name>:<slices>:<memory MiB>", part)
		}
		slices, err1 := strconv.Atoi(f[1])
		mem, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || slices < 1 || slices > 64 {
			return nil, fmt.Errorf("MIG profile %q: slices and memory must be positive integers", part)
		}
		out = append(out, MIGProfile{Name: f[0], Slices: slices, MemoryMiB: mem})
	}
	return out, nil
}

// Attribute names of a group of shared MIG instances, beside a Group's.
const (
	AttrMIGGroupProfile = "mig_profile"
	AttrMIGGroupModel   = "mig_model"
	AttrMIGGroupSlices  = "mig_slices"
	AttrMIGGroupParent  = "mig_parent_slices"
	AttrMIGGroupShares  = "mig_shares"

	attrGPUMIGParent      = "mig_parent"
	attrGPUMIGParentIndex = "mig_parent_index"
	attrGPUMIGProfiles    = "mig_profiles"
)

// GroupMIG says that a Group's GPUs are MIG instances of one profile.
type GroupMIG struct {
	// Model is the parent GPUs' model; Profile the instances' profile.
	Model, Profile string
	// Slices of each instance, of ParentSlices of its parent.
	Slices, ParentSlices int
	// Shares each instance offers (MIGShares); fewer than SharesPerGPU
	// but for a 7g instance.
	Shares int
}

// SharedMIGGroups returns a Group per parent model and MIG profile of the
// inventory's MIG-enabled GPUs (sorted by name), each instance a GroupGPU
// whose Parent is set. Links between instances are SYS: instances are
// never joined into one request. GPUs and MIG devices in skip are left out.
func SharedMIGGroups(inv *Inventory, sharesPerGPU int, sharing string, skip map[string]bool) []Group {
	byName := map[string]*Group{}
	for _, g := range inv.GPUs {
		if !g.MIG || skip[g.UUID] {
			continue
		}
		for _, m := range g.MIGDevices {
			if skip[m.UUID] {
				continue
			}
			name := MIGGroupName(g.Model, m.Profile)
			grp := byName[name]
			if grp == nil {
				grp = &Group{
					Model: name, SharesPerGPU: sharesPerGPU, Sharing: sharing,
					DriverVersion: inv.DriverVersion, CUDAVersion: inv.CUDAVersion,
					ComputeCapability: g.ComputeCapability, MemoryMiB: m.MemoryMiB,
					MIG: &GroupMIG{Model: g.Model, Profile: m.Profile, Slices: m.Slices, ParentSlices: m.ParentSlices,
						Shares: MIGShares(m.Slices, m.ParentSlices, sharesPerGPU)},
				}
				byName[name] = grp
			}
			grp.MemoryMiB = min(grp.MemoryMiB, m.MemoryMiB)
			grp.GPUs = append(grp.GPUs, GroupGPU{UUID: m.UUID, PCIBusID: g.PCIBusID, NUMANode: g.NUMANode,
				Parent: g.UUID, ParentIndex: g.Index, Profiles: g.MIGProfiles, instanceID: m.GPUInstanceID})
		}
	}
	for _, g := range byName {
		slices.SortStableFunc(g.GPUs, func(a, b GroupGPU) int {
			return instanceOrder(a.ParentIndex, a.instanceID, b.ParentIndex, b.instanceID)
		})
		for i := range g.GPUs {
			g.GPUs[i].Links = make([]Link, len(g.GPUs))
			for j := range g.GPUs[i].Links {
				g.GPUs[i].Links[j] = Link{Kind: LinkSYS}
			}
			g.GPUs[i].Links[i] = Link{Kind: LinkSelf}
		}
	}
	return byKey(byName)
}

// migAttributes adds a shared MIG group's attributes to attrs.
func (g *Group) migAttributes(attrs map[string]Attr) {
	m := g.MIG
	attrs[AttrMIGGroupProfile] = StringAttr(m.Profile)
	attrs[AttrMIGGroupModel] = StringAttr(m.Model)
	attrs[AttrMIGGroupSlices] = IntAttr(int64(m.Slices), "")
	attrs[AttrMIGGroupParent] = IntAttr(int64(m.ParentSlices), "")
	attrs[AttrMIGGroupShares] = IntAttr(int64(m.Shares), "")
	for i, gpu := range g.GPUs {
		attrs[gpuAttr(i, attrGPUMIGParent)] = StringAttr(gpu.Parent)
		attrs[gpuAttr(i, attrGPUMIGParentIndex)] = IntAttr(int64(gpu.ParentIndex), "")
		attrs[gpuAttr(i, attrGPUMIGProfiles)] = StringAttr(EncodeMIGProfiles(gpu.Profiles))
	}
}

// decodeMIG reads a shared MIG group's attributes into g, when it has them.
func (d *decoder) decodeMIG(g *Group) {
	if _, ok := d.attrs[AttrMIGGroupProfile]; !ok || d.err != nil {
		return
	}
	m := &GroupMIG{
		Profile: d.str(AttrMIGGroupProfile), Model: d.str(AttrMIGGroupModel),
		Slices: int(d.int(AttrMIGGroupSlices)), ParentSlices: int(d.int(AttrMIGGroupParent)),
		Shares: int(d.int(AttrMIGGroupShares)),
	}
	switch {
	case d.err != nil:
		return
	case m.Slices < 1 || m.ParentSlices < m.Slices:
		d.fail(AttrMIGGroupSlices, fmt.Errorf("%d slices of %d is not a part of a GPU", m.Slices, m.ParentSlices))
	case m.Shares < 1 || m.Shares > g.SharesPerGPU:
		d.fail(AttrMIGGroupShares, fmt.Errorf("%d shares is outside 1..%d", m.Shares, g.SharesPerGPU))
	case g.Model != MIGGroupName(m.Model, m.Profile):
		d.fail(AttrMIGGroupProfile, fmt.Errorf("model %q and profile %q in a device group named %q", m.Model, m.Profile, g.Model))
	}
	g.MIG = m
	for i := range g.GPUs {
		if d.err != nil {
			return
		}
		gpu := &g.GPUs[i]
		gpu.Parent = d.str(gpuAttr(i, attrGPUMIGParent))
		gpu.ParentIndex = int(d.int(gpuAttr(i, attrGPUMIGParentIndex)))
		ps, err := DecodeMIGProfiles(d.str(gpuAttr(i, attrGPUMIGProfiles)))
		if err != nil {
			d.fail(gpuAttr(i, attrGPUMIGProfiles), err)
		}
		gpu.Profiles = ps
		if d.err == nil && (gpu.Parent == "" || !strings.HasPrefix(gpu.UUID, "MIG-")) {
			d.fail(gpuAttr(i, attrGPUMIGParent), fmt.Errorf("instance %q of parent %q is not a MIG device of a GPU", gpu.UUID, gpu.Parent))
		}
	}
}
