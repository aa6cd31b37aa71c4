package model

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// KeyOf names a job's group; an empty namespace is "default".
func KeyOf(job *api.Job, group string) decide.Key {
	return decide.Key{Namespace: orDefault(namespaceOf(job)), Job: *job.ID, Group: group}
}

// AllocKey names the group of an allocation, as KeyOf its job's.
func AllocKey(a *api.Allocation) decide.Key {
	return decide.Key{Namespace: orDefault(a.Namespace), Job: a.JobID, Group: a.TaskGroup}
}

// Template reports whether a job is a template Nomad never places itself:
// a parameterized job (its dispatched children run) or a periodic one (its
// launched children run), paused or not: Nomad never evaluates a periodic
// parent, so a pin on one would hold shares for nothing. Children carry
// their parent's gate and are decided like any job; templates never are,
// and hold nothing.
func Template(job *api.Job) bool {
	return job.ParameterizedJob != nil || job.Periodic != nil
}

// BatchDone reports whether a batch group already finished its work: one
// of its allocations, in the job's own namespace, completed. Its pinned
// shares are free again and it is not placed again.
func (s *State) BatchDone(job *api.Job, group string) bool {
	if job.Type == nil || (*job.Type != api.JobTypeBatch && *job.Type != api.JobTypeSysbatch) {
		return false
	}
	return s.groups().done[KeyOf(job, group)]
}

// Missing returns a group's live allocations and how many more it asks
// for: none once a batch group has finished.
func (s *State) Missing(job *api.Job, tg *api.TaskGroup) ([]*api.Allocation, int) {
	key := KeyOf(job, *tg.Name)
	live := s.GroupAllocs(key.Namespace, key.Job, key.Group)
	if s.BatchDone(job, key.Group) {
		return live, 0
	}
	return live, max(pin.Count(tg)-len(live), 0)
}

func orDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// UnhealthyGPUs lists the UUIDs of a node's gpushare GPUs that have an
// unhealthy share: the plugin marks every share of a lost GPU, or of one
// that raised a critical XID, unhealthy.
func UnhealthyGPUs(n *api.Node) []string {
	if n.NodeResources == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != devicefn.Vendor || d.Type != devicefn.DeviceType {
			continue
		}
		for _, inst := range d.Instances {
			if inst == nil || inst.Healthy {
				continue
			}
			if id, err := devicefn.ParseShareID(inst.ID); err == nil && !seen[id.UUID] {
				seen[id.UUID] = true
				out = append(out, id.UUID)
			}
		}
	}
	return out
}

// GPUOf returns the GPU UUID of a share ID ("" when it is not one).
func GPUOf(share string) string {
	id, err := devicefn.ParseShareID(share)
	if err != nil {
		return ""
	}
	return id.UUID
}
