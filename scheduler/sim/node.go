package sim

import (
	"fmt"
	"sync"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// NodeSpec describes a simulated node whose GPUs are wired like a real
// server of package topologies, by name. The placement core takes the link
// matrix itself (placement.NodeSpec) and knows no server catalog.
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
	// PerGPU and MultiGPU are placement.NodeSpec's: each GPU a device
	// group of its own (device_groups = "gpu"), and a plugin that
	// composes several of them in one task; CellRanks a plugin that
	// fingerprints each GPU's rank in the node's cell order.
	PerGPU    bool `json:"per_gpu,omitempty"`
	MultiGPU  bool `json:"multi_gpu,omitempty"`
	CellRanks bool `json:"cell_ranks,omitempty"`
}

// NodeFromSpec builds the node with placement.NodeFromSpec, giving it the
// named server's link matrix and NUMA nodes. GPU UUIDs are
// "GPU-<node ID>-<i>".
func NodeFromSpec(spec NodeSpec) (*placement.Node, error) {
	ps := placement.NodeSpec{ID: spec.ID, Rack: spec.Rack, CPU: spec.CPU, MemoryMiB: spec.MemoryMiB, Meta: spec.Meta,
		GPUs: spec.GPUs, Model: spec.Model, SharesPerGPU: spec.SharesPerGPU, PerGPU: spec.PerGPU, MultiGPU: spec.MultiGPU, CellRanks: spec.CellRanks}
	if spec.Topology != "" {
		t, err := cachedTopology(spec.Topology)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", placement.ErrBadNode, spec.ID, err)
		}
		if len(t.Links) != spec.GPUs {
			return nil, fmt.Errorf("%w %q: topology %s has %d GPUs, not %d", placement.ErrBadNode, spec.ID, spec.Topology, len(t.Links), spec.GPUs)
		}
		ps.Links, ps.NUMA = t.Links, t.NUMA
	}
	return placement.NodeFromSpec(ps)
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
