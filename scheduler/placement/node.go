package placement

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
)

// MetaRack is the node meta key that names a node's rack.
const MetaRack = "rack"

// NodeFromGroups builds a node from the gpushare device groups decoded from
// its Nomad attributes (devicefn.DecodeGroup), its CPU and memory and its
// meta (meta "rack" places it in a rack). This is how the live service
// builds its snapshot.
func NodeFromGroups(id, name string, capacity Resources, meta map[string]string, groups []devicefn.Group) (*Node, error) {
	n := &Node{ID: id, Name: name, Capacity: capacity, Meta: meta, Rack: meta[MetaRack]}
	if n.Name == "" {
		n.Name = id
	}
	if capacity.CPU < 0 || capacity.MemoryMiB < 0 {
		return nil, fmt.Errorf("%w %q: negative capacity", ErrBadNode, id)
	}
	for _, grp := range groups {
		if grp.SharesPerGPU < 1 || grp.SharesPerGPU > devicefn.MaxSharesPerGPU {
			return nil, fmt.Errorf("%w %q: device %q: shares_per_gpu %d is outside 1..%d", ErrBadNode, id, grp.Model, grp.SharesPerGPU, devicefn.MaxSharesPerGPU)
		}
		if len(grp.GPUs) > 64 {
			return nil, fmt.Errorf("%w %q: device %q has %d GPUs; at most 64 per model are supported", ErrBadNode, id, grp.Model, len(grp.GPUs))
		}
		links := grp.Links()
		numa := make([]int, len(grp.GPUs))
		for i, g := range grp.GPUs {
			numa[i] = g.NUMANode
		}
		tree, err := cells.Build(links, numa)
		if err != nil {
			return nil, fmt.Errorf("%w %q: device %q: %v", ErrBadNode, id, grp.Model, err)
		}
		gg := gpuGroup{model: grp.Model, links: links, tree: tree, cap: grp.SharesPerGPU, perGPU: grp.PerGPU, multiGPU: grp.PerGPU && grp.MultiGPU}
		if grp.PerGPU && grp.CellRanks != nil {
			if len(grp.CellRanks) != len(grp.GPUs) {
				return nil, fmt.Errorf("%w %q: device %q: %d cell ranks for %d GPUs", ErrBadNode, id, grp.Model, len(grp.CellRanks), len(grp.GPUs))
			}
			gg.rank = append([]int(nil), grp.CellRanks...)
			gg.byRank = make([]int, len(gg.rank))
			for li := range gg.byRank {
				gg.byRank[li] = li
			}
			slices.SortStableFunc(gg.byRank, func(a, b int) int { return gg.rank[a] - gg.rank[b] })
		}
		if grp.MIG != nil {
			if err := checkMIGGroup(&grp); err != nil {
				return nil, fmt.Errorf("%w %q: device %q: %v", ErrBadNode, id, grp.Model, err)
			}
			gg.mig, gg.cap = true, grp.MIG.Shares
			n.mig++
		}
		for c := range tree.Cells {
			var m uint64
			for _, g := range tree.Cells[c].GPUs {
				m |= 1 << g
			}
			gg.masks = append(gg.masks, m)
		}
		for i, g := range grp.GPUs {
			if g.UUID == "" {
				return nil, fmt.Errorf("%w %q: device %q GPU %d has no UUID", ErrBadNode, id, grp.Model, i)
			}
			for j := range n.GPUs {
				if n.GPUs[j].UUID == g.UUID {
					return nil, fmt.Errorf("%w %q: GPU UUID %q appears twice", ErrBadNode, id, g.UUID)
				}
			}
			gg.gpus = append(gg.gpus, len(n.GPUs))
			gpu := GPU{
				UUID: g.UUID, Model: grp.Model, NUMA: g.NUMANode, Shares: grp.SharesPerGPU, Cap: gg.cap,
				group: len(n.groups), local: i,
				used: make([]uint64, (grp.SharesPerGPU+63)/64), free: gg.cap,
			}
			if gg.mig {
				gpu.mig, gpu.inst = &migOf{parent: g.Parent, profile: grp.MIG.Profile}, true
				for k := gg.cap; k < gpu.Shares; k++ {
					gpu.setUsed(k, true) // not shares of this instance
				}
			}
			n.GPUs = append(n.GPUs, gpu)
		}
		n.groups = append(n.groups, gg)
	}
	return n, nil
}

// NodeSpec is a plain description of a node, for the simulator and tests.
type NodeSpec struct {
	ID        string            `json:"id"`
	Rack      string            `json:"rack,omitempty"`
	CPU       int64             `json:"cpu"`
	MemoryMiB int64             `json:"memory_mib"`
	Meta      map[string]string `json:"meta,omitempty"`
	// GPUs is the number of GPUs; Model their model.
	GPUs  int    `json:"gpus"`
	Model string `json:"model,omitempty"`
	// Links is the GPUs' link matrix (GPUs x GPUs) and NUMA their NUMA
	// nodes; package topologies has real servers', which the simulator
	// names (scheduler/sim.NodeSpec). Nil Links means every pair is NV1, nil
	// NUMA that all the GPUs share NUMA node 0.
	Links devicefn.Matrix `json:"links,omitempty"`
	NUMA  []int           `json:"numa,omitempty"`
	// SharesPerGPU defaults to devicefn.DefaultSharesPerGPU.
	SharesPerGPU int `json:"shares_per_gpu,omitempty"`
	// PerGPU: the plugin offers each GPU as a device group of its own
	// (device_groups = "gpu"; pergpu.go).
	PerGPU bool `json:"per_gpu,omitempty"`
	// MultiGPU: with PerGPU, the plugin composes several of the node's
	// GPUs in one task (its interposer; devicefn.Group.MultiGPU), so one
	// allocation may hold several.
	MultiGPU bool `json:"multi_gpu,omitempty"`
	// CellRanks: with PerGPU, the plugin fingerprints each GPU's rank in
	// the node's cell order (devicefn.AttrCellRank), the leaf order of the
	// cell tree of Links and NUMA.
	CellRanks bool `json:"cell_ranks,omitempty"`
}

// NodeFromSpec builds a node from a plain description. GPU UUIDs are
// "GPU-<node ID>-<i>".
func NodeFromSpec(spec NodeSpec) (*Node, error) {
	if spec.GPUs < 0 || spec.GPUs > 64 {
		return nil, fmt.Errorf("%w %q: %d GPUs is outside 0..64", ErrBadNode, spec.ID, spec.GPUs)
	}
	spg := spec.SharesPerGPU
	if spg == 0 {
		spg = devicefn.DefaultSharesPerGPU
	}
	model := spec.Model
	if model == "" {
		model = "GPU"
	}
	links, numa := spec.Links, spec.NUMA
	if links != nil {
		if len(links) != spec.GPUs {
			return nil, fmt.Errorf("%w %q: the link matrix has %d rows, not %d (one per GPU)", ErrBadNode, spec.ID, len(links), spec.GPUs)
		}
		if err := links.Validate(); err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadNode, spec.ID, err)
		}
	} else {
		links = make(devicefn.Matrix, spec.GPUs)
		for i := range links {
			links[i] = make([]devicefn.Link, spec.GPUs)
			for j := range links[i] {
				links[i][j] = devicefn.Link{Kind: devicefn.LinkNVLink, NVLinks: 1}
			}
			links[i][i] = devicefn.Link{Kind: devicefn.LinkSelf}
		}
	}
	if numa == nil {
		numa = make([]int, spec.GPUs)
	} else if len(numa) != spec.GPUs {
		return nil, fmt.Errorf("%w %q: %d NUMA nodes given for %d GPUs; give one per GPU or none", ErrBadNode, spec.ID, len(numa), spec.GPUs)
	}
	meta := map[string]string{}
	for k, v := range spec.Meta {
		meta[k] = v
	}
	if spec.Rack != "" {
		meta[MetaRack] = spec.Rack
	}
	var groups []devicefn.Group
	if spec.GPUs > 0 {
		g := devicefn.Group{Model: model, SharesPerGPU: spg, Sharing: devicefn.SharingMPS, PerGPU: spec.PerGPU, MultiGPU: spec.MultiGPU}
		for i := range spec.GPUs {
			g.GPUs = append(g.GPUs, devicefn.GroupGPU{UUID: "GPU-" + spec.ID + "-" + strconv.Itoa(i), NUMANode: numa[i], Links: links[i]})
		}
		if spec.PerGPU && spec.CellRanks {
			tree, err := cells.Build(links, numa)
			if err != nil {
				return nil, fmt.Errorf("%w %q: %v", ErrBadNode, spec.ID, err)
			}
			g.CellRanks = tree.Ranks() // as the plugin fingerprints them
		}
		groups = append(groups, g)
	}
	return NodeFromGroups(spec.ID, spec.ID, Resources{CPU: spec.CPU, MemoryMiB: spec.MemoryMiB}, meta, groups)
}
