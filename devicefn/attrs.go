package devicefn

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// The device contract of docs/device-contract.md.
const (
	// PluginName is the name the plugin registers with Nomad.
	PluginName = "gpushare"
	// Vendor and DeviceType form the "nvidia/gpushare" device a job asks for.
	Vendor     = "nvidia"
	DeviceType = "gpushare"

	// DefaultSharesPerGPU makes one share 1% of a GPU.
	DefaultSharesPerGPU = 100
	// MaxSharesPerGPU bounds shares_per_gpu.
	MaxSharesPerGPU = 1000
)

// Sharing modes: how the co-located shares of one GPU are isolated.
const (
	SharingMPS       = "mps"
	SharingTimeslice = "timeslice"
	SharingExclusive = "exclusive"
)

// Attribute names of a device group. Per-GPU names are "gpu<i>.<suffix>".
const (
	AttrSharesPerGPU      = "shares_per_gpu"
	AttrGPUs              = "gpus"
	AttrMemory            = "memory"
	AttrShareMemory       = "share_memory"
	AttrSharing           = "sharing"
	AttrDriverVersion     = "driver_version"
	AttrCUDAVersion       = "cuda_version"
	AttrComputeCapability = "compute_capability"

	attrGPUUUID     = "uuid"
	attrGPUPCIBusID = "pci_bus_id"
	attrGPUNUMANode = "numa_node"
	attrGPULinks    = "links"
)

// Group is one Nomad device group: the GPUs of one model on one node, each
// exposed as SharesPerGPU instances.
type Group struct {
	// Model is the device name (the GPU model as NVML reports it).
	Model             string
	SharesPerGPU      int
	Sharing           string
	DriverVersion     string
	CUDAVersion       string
	ComputeCapability string
	// MemoryMiB is the memory of one GPU (the smallest, should they differ).
	MemoryMiB uint64
	// GPUs in NVML index order. GroupGPU.Links indexes this slice, so the
	// matrix of a group covers the GPUs of its own model only.
	GPUs []GroupGPU
	// MIG is set when the GPUs are MIG instances shared further
	// (SharedMIGGroups); nil for whole GPUs.
	MIG *GroupMIG
	// PerGPU marks a group merged from per-GPU device groups
	// (MergeGPUGroups): Nomad offers each of its GPUs as a device group of
	// its own, so it takes one request's shares from one GPU. Not encoded.
	PerGPU bool
	// MultiGPU marks a PerGPU group every one of whose per-GPU groups
	// says one task may hold several of them (GPUGroup.MultiGPU): an
	// allocation of several whole GPUs is asked as one device block per
	// GPU. Not encoded.
	MultiGPU bool
	// CellRanks are the GPUs' ranks in their node's cell order, by GPU
	// (AttrCellRank), of a PerGPU group whose every per-GPU group
	// carries one; nil otherwise. Nomad, asked by a node pin to prefer
	// low ranks, takes the GPUs in this order. Not encoded.
	CellRanks []int
}

// GroupGPU is one GPU of a group.
type GroupGPU struct {
	UUID     string
	PCIBusID string
	NUMANode int
	Links    []Link
	// Parent is the UUID of the GPU a MIG instance is part of, ParentIndex
	// its NVML index and Profiles the MIG profiles it offers; "", 0 and nil
	// for a whole GPU.
	Parent      string
	ParentIndex int
	Profiles    []MIGProfile
	instanceID  int
}

// ShareMemoryMiB is the memory that one share stands for (of a shared MIG
// instance: the instance's memory over its shares).
func (g *Group) ShareMemoryMiB() uint64 {
	if g.MIG != nil && g.MIG.Shares > 0 {
		return g.MemoryMiB / uint64(g.MIG.Shares)
	}
	if g.SharesPerGPU <= 0 {
		return 0
	}
	return g.MemoryMiB / uint64(g.SharesPerGPU)
}

// GPUShares is the shares each GPU of the group offers: SharesPerGPU, or a
// shared MIG instance's own.
func (g *Group) GPUShares() int {
	if g.MIG != nil {
		return g.MIG.Shares
	}
	return g.SharesPerGPU
}

// Links returns the group's link matrix.
func (g *Group) Links() Matrix {
	m := make(Matrix, len(g.GPUs))
	for i, gpu := range g.GPUs {
		m[i] = gpu.Links
	}
	return m
}

// Groups splits an inventory into one group per model, sorted by model.
// GPUs listed in skip (by UUID) are left out, as are MIG-enabled GPUs.
func Groups(inv *Inventory, sharesPerGPU int, sharing string, skip map[string]bool) []Group {
	byModel := map[string][]int{}
	for i, g := range inv.GPUs {
		if skip[g.UUID] || g.MIG {
			continue
		}
		byModel[g.Model] = append(byModel[g.Model], i)
	}
	models := make([]string, 0, len(byModel))
	for m := range byModel {
		models = append(models, m)
	}
	sort.Strings(models)

	groups := make([]Group, 0, len(models))
	for _, model := range models {
		idx := byModel[model]
		sub := inv.Links.Sub(idx)
		first := inv.GPUs[idx[0]]
		g := Group{
			Model:             model,
			SharesPerGPU:      sharesPerGPU,
			Sharing:           sharing,
			DriverVersion:     inv.DriverVersion,
			CUDAVersion:       inv.CUDAVersion,
			ComputeCapability: first.ComputeCapability,
			MemoryMiB:         first.MemoryMiB,
		}
		for a, i := range idx {
			gpu := inv.GPUs[i]
			g.MemoryMiB = min(g.MemoryMiB, gpu.MemoryMiB)
			g.GPUs = append(g.GPUs, GroupGPU{UUID: gpu.UUID, PCIBusID: gpu.PCIBusID, NUMANode: gpu.NUMANode, Links: sub[a]})
		}
		groups = append(groups, g)
	}
	return groups
}

func gpuAttr(i int, suffix string) string { return "gpu" + strconv.Itoa(i) + "." + suffix }

// Attributes encodes the group as Nomad device-group attributes (package
// plugin hands them to Nomad in the SDK's type).
func (g *Group) Attributes() map[string]Attr {
	attrs := map[string]Attr{
		AttrSharesPerGPU:      IntAttr(int64(g.SharesPerGPU), ""),
		AttrGPUs:              IntAttr(int64(len(g.GPUs)), ""),
		AttrMemory:            IntAttr(int64(g.MemoryMiB), UnitMiB),
		AttrShareMemory:       IntAttr(int64(g.ShareMemoryMiB()), UnitMiB),
		AttrSharing:           StringAttr(g.Sharing),
		AttrDriverVersion:     StringAttr(g.DriverVersion),
		AttrCUDAVersion:       StringAttr(g.CUDAVersion),
		AttrComputeCapability: StringAttr(g.ComputeCapability),
	}
	for i, gpu := range g.GPUs {
		attrs[gpuAttr(i, attrGPUUUID)] = StringAttr(gpu.UUID)
		attrs[gpuAttr(i, attrGPUPCIBusID)] = StringAttr(gpu.PCIBusID)
		attrs[gpuAttr(i, attrGPUNUMANode)] = IntAttr(int64(gpu.NUMANode), "")
		attrs[gpuAttr(i, attrGPULinks)] = StringAttr(EncodeRow(gpu.Links))
	}
	if g.MIG != nil {
		g.migAttributes(attrs)
	}
	return attrs
}

// ErrBadAttributes is wrapped by every decoding error.
var ErrBadAttributes = errors.New("invalid gpushare device attributes")

// DecodeGroup rebuilds a Group from the attributes of a device group named
// model, as the scheduler reads them back from Nomad (package
// scheduler/nomadattr converts the API's attributes). It is the exact
// inverse of Attributes.
func DecodeGroup(model string, attrs map[string]Attr) (*Group, error) {
	d := decoder{attrs: attrs}
	g := &Group{
		Model:             model,
		SharesPerGPU:      int(d.int(AttrSharesPerGPU)),
		Sharing:           d.str(AttrSharing),
		DriverVersion:     d.str(AttrDriverVersion),
		CUDAVersion:       d.str(AttrCUDAVersion),
		ComputeCapability: d.str(AttrComputeCapability),
		MemoryMiB:         uint64(d.int(AttrMemory)),
	}
	n := int(d.int(AttrGPUs))
	if d.err == nil && (n < 0 || n > 4096) {
		d.fail(AttrGPUs, fmt.Errorf("%d GPUs is out of range", n))
	}
	if d.err == nil && (g.SharesPerGPU < 1 || g.SharesPerGPU > MaxSharesPerGPU) {
		d.fail(AttrSharesPerGPU, fmt.Errorf("%d is outside 1..%d", g.SharesPerGPU, MaxSharesPerGPU))
	}
	for i := 0; i < n && d.err == nil; i++ {
		gpu := GroupGPU{
			UUID:     d.str(gpuAttr(i, attrGPUUUID)),
			PCIBusID: d.str(gpuAttr(i, attrGPUPCIBusID)),
			NUMANode: int(d.int(gpuAttr(i, attrGPUNUMANode))),
		}
		if links := d.str(gpuAttr(i, attrGPULinks)); d.err == nil {
			row, err := DecodeRow(links)
			if err != nil {
				d.fail(gpuAttr(i, attrGPULinks), err)
			}
			gpu.Links = row
		}
		g.GPUs = append(g.GPUs, gpu)
	}
	d.decodeMIG(g)
	if d.err != nil {
		return nil, d.err
	}
	if err := g.Links().Validate(); err != nil {
		return nil, fmt.Errorf("%w: device %q: %v", ErrBadAttributes, model, err)
	}
	return g, nil
}

type decoder struct {
	attrs map[string]Attr
	err   error
}

func (d *decoder) fail(name string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: attribute %q: %v", ErrBadAttributes, name, err)
	}
}

func (d *decoder) get(name string) (Attr, bool) {
	a, ok := d.attrs[name]
	if !ok {
		d.fail(name, errors.New("missing; is the node running the gpushare plugin of a matching version?"))
	}
	return a, ok
}

func (d *decoder) str(name string) string {
	a, ok := d.get(name)
	if !ok {
		return ""
	}
	v, ok := a.GetString()
	if !ok {
		d.fail(name, fmt.Errorf("want a string, got %s", a.GoString()))
	}
	return v
}

func (d *decoder) int(name string) int64 {
	a, ok := d.get(name)
	if !ok {
		return 0
	}
	v, ok := a.GetInt()
	if !ok {
		d.fail(name, fmt.Errorf("want an integer, got %s", a.GoString()))
	}
	return v
}
