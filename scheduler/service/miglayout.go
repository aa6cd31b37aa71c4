package service

import (
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/miglayout"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// GPUs is the body of /v1/gpus: the GPU map and, per node and model of
// MIG-enabled GPUs, the layout the demand calls for.
type GPUs struct {
	*gpumap.Map
	// MIGLayouts are the layouts recommended (package miglayout). They are
	// computed from aggregate request sizes and name no job: every token
	// that may read nodes sees the same.
	MIGLayouts []miglayout.Recommendation `json:"mig_layouts,omitempty"`
}

// migLayouts recommends a layout for each node's MIG-enabled GPUs of a
// model from the demand the model holds now; nothing when no node has MIG.
// It reads the model under the lock (the demand only when a node may have
// MIG GPUs) and decodes and computes after it.
func (v *apiView) migLayouts() []miglayout.Recommendation {
	managed := v.namespaces()
	v.c.mu.Lock()
	nodes := nodesNow(v.c.state)
	var allocs []*api.Allocation
	var demand []miglayout.Demand
	mig := slices.ContainsFunc(nodes, mayHaveMIG)
	if mig {
		allocs, demand = liveAllocsNow(v.c.state), v.migDemand(managed)
	}
	v.c.mu.Unlock()
	if !mig {
		return nil
	}
	gpus, _ := miglayout.FromNomad(nodes, allocs) // the GPU map names the groups it cannot decode
	return miglayout.Recommend(gpus, demand, miglayout.DefaultOptions)
}

// mayHaveMIG reports whether a node offers MIG instances, whole or shared.
func mayHaveMIG(n *api.Node) bool {
	if n == nil || n.NodeResources == nil {
		return false
	}
	return slices.ContainsFunc(n.NodeResources.Devices, func(d *api.NodeDeviceResource) bool {
		if d == nil || d.Vendor != devicefn.Vendor {
			return false
		}
		_, shared := d.Attributes[devicefn.AttrMIGGroupProfile]
		return d.Type == devicefn.MIGDeviceType || (d.Type == devicefn.DeviceType && shared)
	})
}

// migDemand is every request of the groups of managed namespaces that wait
// or run, weighted by their allocations (live and missing): their
// nvidia/gpushare request (miglayout counts the fractional ones) and their
// requests of whole MIG instances. Groups refused for good, stopped jobs
// and templates ask for nothing. The caller holds the model's lock.
func (v *apiView) migDemand(managed namespaces) []miglayout.Demand {
	var out []miglayout.Demand
	for _, job := range v.c.state.Jobs {
		if (job.Stop != nil && *job.Stop) || model.Template(job) {
			continue
		}
		for _, tg := range job.TaskGroups {
			key := model.KeyOf(job, *tg.Name)
			if !managed.has(key.Namespace) || pin.Count(tg) == 0 {
				continue
			}
			if _, never := v.refusals.refusedForGood(key); never {
				continue
			}
			live, missing := v.c.state.Missing(job, tg)
			n := len(live) + missing
			if n == 0 {
				continue
			}
			if pin.Wants(tg) {
				if r, err := v.c.state.Request(job, *tg.Name, v.profile); err == nil && r.Shares > 0 {
					out = append(out, miglayout.Demand{Shares: r.Shares, Models: r.Models, Weight: float64(n)})
				}
			}
			out = append(out, miglayout.TaskGroupDemand(tg, n)...)
		}
	}
	return out
}
