package nomadattr

import (
	"fmt"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// DecodeGroups decodes every nvidia/gpushare device group of a node (devs:
// api.Node.NodeResources.Devices; other devices are skipped) into the
// per-model groups the scheduler places on: a per-model group as
// DecodeGroup reads it, and the per-GPU groups of a plugin with
// device_groups = "gpu" merged by model (devicefn.MergeGPUGroups, marked
// PerGPU). Groups that do not decode, or per-GPU groups of a model that
// do not merge, are left out, each with an error naming its device.
func DecodeGroups(devs []*api.NodeDeviceResource) ([]devicefn.Group, []error) {
	var out []devicefn.Group
	var errs []error
	var perGPU []devicefn.GPUGroup
	for _, d := range devs {
		if d == nil || d.Vendor != devicefn.Vendor || d.Type != devicefn.DeviceType {
			continue
		}
		attrs := FromAPI(d.Attributes)
		if devicefn.IsGPUGroup(attrs) {
			g, err := devicefn.DecodeGPUGroup(d.Name, attrs)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			perGPU = append(perGPU, *g)
			continue
		}
		g, err := devicefn.DecodeGroup(d.Name, attrs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, *g)
	}
	if len(perGPU) == 0 {
		return out, errs
	}
	byModel := map[string][]devicefn.GPUGroup{}
	var models []string
	for _, g := range perGPU {
		if byModel[g.Model] == nil {
			models = append(models, g.Model)
		}
		byModel[g.Model] = append(byModel[g.Model], g)
	}
	for _, m := range models {
		merged, err := devicefn.MergeGPUGroups(byModel[m])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, g := range merged {
			for _, o := range out {
				if o.Model == g.Model {
					errs = append(errs, fmt.Errorf("%w: a device group named %q beside per-GPU groups of that model", devicefn.ErrBadAttributes, g.Model))
				}
			}
		}
		out = append(out, merged...)
	}
	return out, errs
}

// GPUDevices is the per-GPU device groups of g's GPUs as Nomad's API
// returns the fingerprint of a plugin with device_groups = "gpu", GPU i of
// g being NVML index i (g a per-model group of the node's only model):
// tests and tools that build nodes use it; DecodeGroups(GPUDevices(g))
// equals g marked PerGPU.
func GPUDevices(g *devicefn.Group) []*api.NodeDeviceResource {
	var out []*api.NodeDeviceResource
	for i, gpu := range g.GPUs {
		one := *g
		one.PerGPU = false
		one.GPUs = []devicefn.GroupGPU{gpu}
		one.GPUs[0].Links = []devicefn.Link{{Kind: devicefn.LinkSelf}}
		gg := devicefn.GPUGroup{Group: one, Index: i, NodeLinks: gpu.Links}
		d := &api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: gg.Name(), Attributes: ToAPI(gg.Attributes())}
		for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: id, Healthy: true})
		}
		out = append(out, d)
	}
	return out
}
