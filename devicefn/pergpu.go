package devicefn

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
)

// One device group per GPU (the plugin's device_groups = "gpu"): instead
// of one nvidia/gpushare group per model on a node, every whole GPU is a
// group of its own named "<model> GPU <index>" (GPUGroupName), so that
// Nomad, which takes one request's instances from one group, lands every
// request of up to one GPU on one GPU and places each allocation of a
// group on its own. Each such group has a Group's attributes for its one
// GPU plus AttrModel, AttrGPUIndex and AttrNodeLinks, from which
// MergeGPUGroups rebuilds the per-model Group the scheduler places on.
// Share IDs and Reserve are the same under both.

// Values of the plugin's device_groups option.
const (
	// DeviceGroupsModel offers one group per GPU model on a node (the
	// default): nvidia/gpushare/<model>.
	DeviceGroupsModel = "model"
	// DeviceGroupsGPU offers one group per GPU: nvidia/gpushare/<model> GPU <index>.
	DeviceGroupsGPU = "gpu"
)

// GPUGroupInfix joins a model and a GPU's NVML index into the device name
// of a per-GPU group.
const GPUGroupInfix = " GPU "

// ModelPattern is a regexp that a gpushare device group's name matches
// when its GPUs are whole GPUs of model: the model's group (one group per
// model) or any of its per-GPU groups (GPUGroupName), never a group of
// shared MIG instances. A scheduler's pin of a request by model writes it
// as a ${device.model} regexp, which holds under both contracts.
func ModelPattern(model string) string {
	return "^" + regexp.QuoteMeta(model) + "(" + regexp.QuoteMeta(GPUGroupInfix) + "[0-9]+)?$"
}

// GPUGroupName is the device name of the per-GPU group of the GPU of NVML
// index index: "NVIDIA A100-SXM4-40GB GPU 3". Unique on a node.
func GPUGroupName(model string, index int) string {
	return model + GPUGroupInfix + strconv.Itoa(index)
}

// Attribute names of a per-GPU group, beside a Group's.
const (
	// AttrModel is the GPU's model: ${device.attr.model} is what
	// ${device.model} is for a per-model group.
	AttrModel = "model"
	// AttrGPUIndex is the GPU's NVML index.
	AttrGPUIndex = "index"
	// AttrNodeLinks is the GPU's row of the node's whole link matrix,
	// indexed by NVML index (EncodeRow).
	AttrNodeLinks = "node_links"
	// AttrMultiGPU says how one task may hold several of the node's
	// per-GPU groups, asked as one device block per GPU: Nomad merges the
	// blocks' reservations' environment by overwriting, so the last
	// block's CUDA_VISIBLE_DEVICES would win, and something must put the
	// GPUs back together. Its one value, MultiGPUInterposer: the plugin's
	// CUDA interposer does, in every process it is loaded into, from the
	// GPUSHARE_GPU_<index> variable each reservation adds. Absent (an
	// older plugin, or the interposer disabled): an allocation holds at
	// most one of the node's GPUs.
	AttrMultiGPU = "multi_gpu"
	// MultiGPUInterposer is AttrMultiGPU's value when the interposer
	// composes a task's per-GPU reservations.
	MultiGPUInterposer = "interposer"
	// AttrCellRank is the GPU's rank in its node's cell order: its
	// position when the leaves of the node's cell tree (built from the
	// whole link matrix and NUMA nodes, as the scheduler builds it:
	// devicefn/cells.Tree.LeafOrder) are read left to right. GPUs next
	// to each other in it share the smallest cells (DGX-1 V100: GPUs 0, 3,
	// 1, 2, 4, 7, 5, 6 have ranks 0..7), so a scheduler's node pin that
	// asks Nomad to prefer low ranks (${device.attr.cell_rank} <= k) has
	// Nomad take a node's GPUs best cell first. Rank = index on a node of
	// one GPU or whose best pairs are index pairs. Absent from plugins
	// before it.
	AttrCellRank = "cell_rank"
)

// GPUGroup is one GPU offered as a device group of its own.
type GPUGroup struct {
	// Group holds the one GPU (Group.GPUs[0], its Links just X); its Model
	// is the GPU's model, not the device name (Name).
	Group
	// Index is the GPU's NVML index.
	Index int
	// NodeLinks is the GPU's row of the node's link matrix (every GPU of
	// the inventory, by NVML index).
	NodeLinks []Link
	// MultiGPU: one task may hold several of the node's per-GPU groups
	// (AttrMultiGPU); the plugin sets it when its interposer composes them.
	MultiGPU bool
	// Ranked says the group carries CellRank (AttrCellRank), the GPU's
	// rank in its node's cell order; the plugin sets both.
	Ranked   bool
	CellRank int
}

// Name is the group's device name (GPUGroupName).
func (g *GPUGroup) Name() string { return GPUGroupName(g.Model, g.Index) }

// GPUGroups returns a group per whole GPU of the inventory, in NVML index
// order. GPUs in skip (by UUID) and MIG-enabled GPUs are left out, as
// Groups leaves them out.
func GPUGroups(inv *Inventory, sharesPerGPU int, sharing string, skip map[string]bool) []GPUGroup {
	var out []GPUGroup
	for i, gpu := range inv.GPUs {
		if skip[gpu.UUID] || gpu.MIG {
			continue
		}
		out = append(out, GPUGroup{
			Group: Group{
				Model: gpu.Model, SharesPerGPU: sharesPerGPU, Sharing: sharing,
				DriverVersion: inv.DriverVersion, CUDAVersion: inv.CUDAVersion,
				ComputeCapability: gpu.ComputeCapability, MemoryMiB: gpu.MemoryMiB,
				GPUs: []GroupGPU{{UUID: gpu.UUID, PCIBusID: gpu.PCIBusID, NUMANode: gpu.NUMANode, Links: []Link{{Kind: LinkSelf}}}},
			},
			Index:     gpu.Index,
			NodeLinks: slices.Clone(inv.Links[i]),
		})
	}
	return out
}

// Attributes encodes the group as Nomad device-group attributes.
func (g *GPUGroup) Attributes() map[string]Attr {
	attrs := g.Group.Attributes()
	attrs[AttrModel] = StringAttr(g.Model)
	attrs[AttrGPUIndex] = IntAttr(int64(g.Index), "")
	attrs[AttrNodeLinks] = StringAttr(EncodeRow(g.NodeLinks))
	if g.MultiGPU {
		attrs[AttrMultiGPU] = StringAttr(MultiGPUInterposer)
	}
	if g.Ranked {
		attrs[AttrCellRank] = IntAttr(int64(g.CellRank), "")
	}
	return attrs
}

// IsGPUGroup reports whether a gpushare device group's attributes are a
// per-GPU group's (they carry the GPU's index).
func IsGPUGroup(attrs map[string]Attr) bool {
	_, ok := attrs[AttrGPUIndex]
	return ok
}

// DecodeGPUGroup rebuilds a GPUGroup from the attributes of the device
// group named name; the exact inverse of GPUGroup.Attributes.
func DecodeGPUGroup(name string, attrs map[string]Attr) (*GPUGroup, error) {
	d := decoder{attrs: attrs}
	model, index, links := d.str(AttrModel), d.int(AttrGPUIndex), d.str(AttrNodeLinks)
	if d.err != nil {
		return nil, d.err
	}
	row, err := DecodeRow(links)
	if err != nil {
		return nil, fmt.Errorf("%w: attribute %q: %v", ErrBadAttributes, AttrNodeLinks, err)
	}
	if index < 0 || int(index) >= len(row) || row[index].Kind != LinkSelf {
		return nil, fmt.Errorf("%w: device %q: index %d is not the X of its node_links row %q", ErrBadAttributes, name, index, links)
	}
	if want := GPUGroupName(model, int(index)); name != want {
		return nil, fmt.Errorf("%w: device %q: model %q and index %d make a per-GPU group named %q", ErrBadAttributes, name, model, index, want)
	}
	g, err := DecodeGroup(model, attrs)
	if err != nil {
		return nil, err
	}
	if len(g.GPUs) != 1 || g.MIG != nil {
		return nil, fmt.Errorf("%w: device %q: a per-GPU group holds one whole GPU, not %d", ErrBadAttributes, name, len(g.GPUs))
	}
	multi := false
	if a, ok := attrs[AttrMultiGPU]; ok {
		v, _ := a.GetString()
		if v != MultiGPUInterposer {
			return nil, fmt.Errorf("%w: device %q: attribute %q is %q, want %q or none", ErrBadAttributes, name, AttrMultiGPU, a.GoString(), MultiGPUInterposer)
		}
		multi = true
	}
	out := &GPUGroup{Group: *g, Index: int(index), NodeLinks: row, MultiGPU: multi}
	if _, ok := attrs[AttrCellRank]; ok {
		rank := d.int(AttrCellRank)
		if d.err != nil {
			return nil, d.err
		}
		if rank < 0 || int(rank) >= len(row) {
			return nil, fmt.Errorf("%w: device %q: cell_rank %d is outside 0..%d (one rank per GPU of its node_links row)", ErrBadAttributes, name, rank, len(row)-1)
		}
		out.Ranked, out.CellRank = true, int(rank)
	}
	return out, nil
}

// MergeGPUGroups rebuilds, from a node's per-GPU groups, the per-model
// groups that Groups would have made of the same GPUs (sorted by model,
// GPUs in NVML index order, the link matrix of each model cut from the
// node's), each marked PerGPU. It returns an error when the groups of one
// model disagree (shares, sharing, versions), two share an index, or
// their link rows do not form a valid matrix. Group.CellRanks holds the
// GPUs' cell ranks when every one of the model's groups carries one.
func MergeGPUGroups(gs []GPUGroup) ([]Group, error) {
	byModel := map[string][]GPUGroup{}
	for _, g := range gs {
		byModel[g.Model] = append(byModel[g.Model], g)
	}
	out := make([]Group, 0, len(byModel))
	for _, model := range slices.Sorted(maps.Keys(byModel)) {
		members := byModel[model]
		slices.SortFunc(members, func(a, b GPUGroup) int { return a.Index - b.Index })
		first := members[0]
		g := Group{
			Model: model, SharesPerGPU: first.SharesPerGPU, Sharing: first.Sharing,
			DriverVersion: first.DriverVersion, CUDAVersion: first.CUDAVersion,
			ComputeCapability: first.ComputeCapability, MemoryMiB: first.MemoryMiB, PerGPU: true,
			MultiGPU: true,
		}
		ranked := true
		for a, m := range members {
			name := m.Name()
			switch {
			case m.SharesPerGPU != g.SharesPerGPU || m.Sharing != g.Sharing || m.DriverVersion != g.DriverVersion || m.CUDAVersion != g.CUDAVersion:
				return nil, fmt.Errorf("%w: device %q: shares_per_gpu, sharing or versions differ from %q", ErrBadAttributes, name, first.Name())
			case a > 0 && m.Index == members[a-1].Index:
				return nil, fmt.Errorf("%w: devices %q: two groups of one GPU index", ErrBadAttributes, name)
			case len(m.GPUs) != 1:
				return nil, fmt.Errorf("%w: device %q: a per-GPU group holds one GPU, not %d", ErrBadAttributes, name, len(m.GPUs))
			}
			gpu := m.GPUs[0]
			gpu.Links = make([]Link, len(members))
			for b, o := range members {
				if o.Index >= len(m.NodeLinks) {
					return nil, fmt.Errorf("%w: device %q: node_links has %d entries, GPU index %d is beyond it", ErrBadAttributes, name, len(m.NodeLinks), o.Index)
				}
				gpu.Links[b] = m.NodeLinks[o.Index]
			}
			g.MemoryMiB = min(g.MemoryMiB, m.MemoryMiB)
			g.MultiGPU = g.MultiGPU && m.MultiGPU
			ranked = ranked && m.Ranked
			g.CellRanks = append(g.CellRanks, m.CellRank)
			g.GPUs = append(g.GPUs, gpu)
		}
		if err := g.Links().Validate(); err != nil {
			return nil, fmt.Errorf("%w: per-GPU groups of %q: %v", ErrBadAttributes, model, err)
		}
		if !ranked {
			g.CellRanks = nil // an older plugin's, or mixed: Nomad cannot rank them
		}
		out = append(out, g)
	}
	return out, nil
}

// ModelOfDevice is the model a gpushare device group's GPUs are of, as
// the scheduler names the group it merges them into: a per-GPU group's
// model attribute, or the device name of any other group.
func ModelOfDevice(name string, attrs map[string]Attr) string {
	if a, ok := attrs[AttrModel]; ok && IsGPUGroup(attrs) {
		if s, ok := a.GetString(); ok {
			return s
		}
	}
	return name
}
