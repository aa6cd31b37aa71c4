package gpumap

import (
	"sort"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// shareHealth maps each GPU of a gpushare device group to one of its
// shares' Nomad instances, an unhealthy one when there is one.
func shareHealth(d *api.NodeDeviceResource) map[string]*api.NodeDevice {
	health := map[string]*api.NodeDevice{}
	for _, inst := range d.Instances {
		if inst == nil {
			continue
		}
		if id, err := devicefn.ParseShareID(inst.ID); err == nil {
			if prev, ok := health[id.UUID]; !ok || (prev.Healthy && !inst.Healthy) {
				health[id.UUID] = inst
			}
		}
	}
	return health
}

// sharedMIG gathers a node's shared MIG instances (mig_instances =
// "shared") under their parent GPUs, one Node per parent model.
type sharedMIG struct {
	node    *api.Node
	parents map[string]*GPU
	byModel map[string]*Node
	order   []string // parent UUIDs, as met
	models  map[string]string
}

func (s *sharedMIG) add(g *devicefn.Group, health map[string]*api.NodeDevice) {
	if s.parents == nil {
		s.parents, s.byModel, s.models = map[string]*GPU{}, map[string]*Node{}, map[string]string{}
	}
	if s.byModel[g.MIG.Model] == nil {
		n := s.node
		s.byModel[g.MIG.Model] = &Node{ID: n.ID, Name: n.Name, Status: n.Status, Model: g.MIG.Model, Sharing: g.Sharing,
			SharesPerGPU: g.SharesPerGPU, MIG: devicefn.MIGShared}
	}
	for _, gpu := range g.GPUs {
		p := s.parents[gpu.Parent]
		if p == nil {
			p = &GPU{Index: gpu.ParentIndex, UUID: gpu.Parent, NUMANode: gpu.NUMANode, Healthy: true}
			s.parents[gpu.Parent] = p
			s.models[gpu.Parent] = g.MIG.Model
			s.order = append(s.order, gpu.Parent)
		}
		inst := Instance{UUID: gpu.UUID, Profile: g.MIG.Profile, Slices: g.MIG.Slices, MemoryMiB: g.MemoryMiB, Healthy: true, Shares: g.MIG.Shares}
		if h := health[gpu.UUID]; h != nil && !h.Healthy {
			inst.Healthy, inst.Health = false, h.HealthDescription
			if p.Healthy {
				p.Healthy, p.Health = false, h.HealthDescription
			}
		}
		p.Shares += inst.Shares
		p.MIG = append(p.MIG, inst)
	}
}

// nodes returns the Nodes of the parents, by model, GPUs by index and
// instances largest first.
func (s *sharedMIG) nodes() []Node {
	var models []string
	for _, uuid := range s.order {
		g := s.parents[uuid]
		sort.Slice(g.MIG, func(i, j int) bool {
			if g.MIG[i].Slices != g.MIG[j].Slices {
				return g.MIG[i].Slices > g.MIG[j].Slices
			}
			return g.MIG[i].UUID < g.MIG[j].UUID
		})
		n := s.byModel[s.models[uuid]]
		if len(n.GPUs) == 0 {
			models = append(models, n.Model)
		}
		n.GPUs = append(n.GPUs, *g)
	}
	sort.Strings(models)
	out := make([]Node, 0, len(models))
	for _, m := range models {
		n := s.byModel[m]
		sort.Slice(n.GPUs, func(i, j int) bool { return n.GPUs[i].Index < n.GPUs[j].Index })
		out = append(out, *n)
	}
	return out
}

// migRank orders a node's entries of one model: GPUs without MIG, then
// shared instances, then instances offered whole.
func migRank(n Node) int {
	switch n.MIG {
	case devicefn.MIGShared:
		return 1
	case devicefn.MIGWhole:
		return 2
	}
	return 0
}
