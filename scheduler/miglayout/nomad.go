package miglayout

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
)

// FromNomad reads the MIG-enabled GPUs of the nodes from their device
// groups (whole instances in nvidia/gpushare-mig/<profile>, shared ones in
// nvidia/gpushare groups "<model> MIG <profile>") and what the live
// allocations among allocs hold of them. Nodes without MIG are left out;
// problems name the device groups that could not be decoded.
func FromNomad(nodes []*api.Node, allocs []*api.Allocation) ([]Node, []string) {
	var out []Node
	var problems []string
	where := map[[2]string]*Instance{} // node ID and MIG UUID -> its instance in out
	for _, n := range nodes {
		if n == nil || n.NodeResources == nil {
			continue
		}
		b := nodeBuilder{spg: devicefn.DefaultSharesPerGPU, byParent: map[string]*GPU{}, models: map[string]*Model{}, gpus: map[string][]*GPU{}}
		for _, d := range n.NodeResources.Devices {
			if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.DeviceType {
				if g, err := nomadattr.DecodeGroup(d); err == nil && g.MIG == nil {
					b.spg = g.SharesPerGPU // whole instances count in the node's shares
				}
			}
		}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != devicefn.Vendor {
				continue
			}
			var err error
			switch d.Type {
			case devicefn.DeviceType:
				err = b.shared(d)
			case devicefn.MIGDeviceType:
				err = b.whole(d)
			}
			if err != nil {
				problems = append(problems, "node "+n.Name+": "+err.Error())
			}
		}
		if len(b.order) == 0 {
			continue
		}
		node := Node{ID: n.ID, Name: n.Name}
		slices.Sort(b.order)
		for _, model := range b.order {
			m := b.models[model]
			for _, g := range b.gpus[model] {
				m.GPUs = append(m.GPUs, *g)
			}
			slices.SortFunc(m.GPUs, func(a, b GPU) int { return a.Index - b.Index })
			node.Models = append(node.Models, *m)
		}
		out = append(out, node)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		for j := range out[i].Models {
			for k := range out[i].Models[j].GPUs {
				g := &out[i].Models[j].GPUs[k]
				for l := range g.Instances {
					where[[2]string{out[i].ID, g.Instances[l].UUID}] = &g.Instances[l]
				}
			}
		}
	}
	for _, a := range allocs {
		if a == nil || a.ClientTerminalStatus() || a.ServerTerminalStatus() || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			for _, d := range tr.Devices {
				if d == nil || d.Vendor != devicefn.Vendor {
					continue
				}
				for _, id := range d.DeviceIDs {
					switch d.Type {
					case devicefn.MIGDeviceType:
						if inst := where[[2]string{a.NodeID, id}]; inst != nil {
							inst.Used = inst.Slices
						}
					case devicefn.DeviceType:
						if sid, err := devicefn.ParseShareID(id); err == nil && where[[2]string{a.NodeID, sid.UUID}] != nil {
							where[[2]string{a.NodeID, sid.UUID}].Used++
						}
					}
				}
			}
		}
	}
	return out, problems
}

type nodeBuilder struct {
	spg      int
	byParent map[string]*GPU
	models   map[string]*Model
	gpus     map[string][]*GPU // by model
	order    []string
}

// gpu returns the parent GPU uuid of model, made on first sight.
func (b *nodeBuilder) gpu(model, uuid string, index, parentSlices int, profiles []devicefn.MIGProfile, mode string, spg int) *GPU {
	m := b.models[model]
	if m == nil {
		m = &Model{Model: model, ParentSlices: parentSlices}
		b.models[model] = m
		b.order = append(b.order, model)
	}
	if len(m.Profiles) == 0 {
		m.Profiles = profiles
	}
	g := b.byParent[uuid]
	if g == nil {
		g = &GPU{Index: index, UUID: uuid, Mode: mode, SharesPerGPU: spg}
		b.byParent[uuid] = g
		b.gpus[model] = append(b.gpus[model], g)
	}
	return g
}

// shared adds the instances of a gpushare group of shared MIG instances.
func (b *nodeBuilder) shared(d *api.NodeDeviceResource) error {
	g, err := nomadattr.DecodeGroup(d)
	if err != nil || g.MIG == nil {
		return err
	}
	for _, gpu := range g.GPUs {
		p := b.gpu(g.MIG.Model, gpu.Parent, gpu.ParentIndex, g.MIG.ParentSlices, gpu.Profiles, devicefn.MIGShared, g.SharesPerGPU)
		p.Instances = append(p.Instances, Instance{UUID: gpu.UUID, Profile: g.MIG.Profile, Slices: g.MIG.Slices})
	}
	return nil
}

// whole adds the instances of a gpushare-mig group.
func (b *nodeBuilder) whole(d *api.NodeDeviceResource) error {
	g, err := nomadattr.DecodeMIGGroup(d)
	if err != nil {
		return err
	}
	for _, inst := range g.Instances {
		p := b.gpu(inst.Parent.Model, inst.Parent.UUID, inst.Parent.Index, inst.ParentSlices, inst.Parent.MIGProfiles, devicefn.MIGWhole, b.spg)
		p.Instances = append(p.Instances, Instance{UUID: inst.UUID, Profile: inst.Profile, Slices: inst.Slices})
	}
	return nil
}

// TaskGroupDemand is what a task group asks of whole MIG instances: a
// Demand per task's nvidia/gpushare-mig/<profile> device (or
// nvidia/gpushare-mig with a ${device.attr.profile} constraint), of count
// instances each, weighted by allocs; requests of no known profile are
// left out.
func TaskGroupDemand(tg *api.TaskGroup, allocs int) []Demand {
	var out []Demand
	prefix := devicefn.Vendor + "/" + devicefn.MIGDeviceType
	for _, t := range tg.Tasks {
		if t == nil || t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if d == nil || (d.Name != prefix && !strings.HasPrefix(d.Name, prefix+"/")) {
				continue
			}
			profile := strings.TrimPrefix(strings.TrimPrefix(d.Name, prefix), "/")
			for _, c := range d.Constraints {
				if c != nil && c.LTarget == "${device.attr."+devicefn.AttrMIGProfile+"}" && (c.Operand == "" || c.Operand == "=" || c.Operand == "==") {
					profile = c.RTarget
				}
			}
			n := 1
			if d.Count != nil {
				n = int(*d.Count)
			}
			if profile != "" && n > 0 && allocs > 0 {
				out = append(out, Demand{Profile: profile, Weight: float64(n * allocs)})
			}
		}
	}
	return out
}
