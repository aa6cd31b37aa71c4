package placement

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/cells"
	"github.com/gpushare/gpushare/scheduler/topologies"
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
		gg := gpuGroup{model: grp.Model, links: links, tree: tree}
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
			n.GPUs = append(n.GPUs, GPU{
				UUID: g.UUID, Model: grp.Model, NUMA: g.NUMANode, Shares: grp.SharesPerGPU,
				group: len(n.groups), local: i,
				used: make([]uint64, (grp.SharesPerGPU+63)/64), free: grp.SharesPerGPU,
			})
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
	// Topology names a real server's link matrix (package topologies); it
	// must have exactly GPUs GPUs. Empty means every pair is NV1 and all the
	// GPUs share NUMA node 0.
	Topology string `json:"topology,omitempty"`
	// SharesPerGPU defaults to devicefn.DefaultSharesPerGPU.
	SharesPerGPU int `json:"shares_per_gpu,omitempty"`
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
	var links devicefn.Matrix
	numa := make([]int, spec.GPUs)
	if spec.Topology != "" {
		t, err := cachedTopology(spec.Topology)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadNode, spec.ID, err)
		}
		if len(t.Links) != spec.GPUs {
			return nil, fmt.Errorf("%w %q: topology %s has %d GPUs, not %d", ErrBadNode, spec.ID, spec.Topology, len(t.Links), spec.GPUs)
		}
		links, numa = t.Links, t.NUMA
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
	meta := map[string]string{}
	for k, v := range spec.Meta {
		meta[k] = v
	}
	if spec.Rack != "" {
		meta[MetaRack] = spec.Rack
	}
	var groups []devicefn.Group
	if spec.GPUs > 0 {
		g := devicefn.Group{Model: model, SharesPerGPU: spg, Sharing: devicefn.SharingMPS}
		for i := range spec.GPUs {
			g.GPUs = append(g.GPUs, devicefn.GroupGPU{UUID: "GPU-" + spec.ID + "-" + strconv.Itoa(i), NUMANode: numa[i], Links: links[i]})
		}
		groups = append(groups, g)
	}
	return NodeFromGroups(spec.ID, spec.ID, Resources{CPU: spec.CPU, MemoryMiB: spec.MemoryMiB}, meta, groups)
}

var (
	topoOnce  sync.Once
	topoCache map[string]topologies.Topology
)

// cachedTopology parses the embedded topologies once; they are immutable.
func cachedTopology(name string) (topologies.Topology, error) {
	topoOnce.Do(func() {
		topoCache = map[string]topologies.Topology{}
		for _, n := range topologies.Names() {
			if t, err := topologies.Get(n); err == nil {
				topoCache[n] = t
			}
		}
	})
	if t, ok := topoCache[name]; ok {
		return t, nil
	}
	return topologies.Get(name)
}
