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
// a parameterized job that is not a dispatched child (its dispatched
// children run; Nomad keeps the parent's ParameterizedJob block in each,
// with Dispatched set) or a periodic one (its launched children, which
// carry no Periodic block, run), paused or not: Nomad never evaluates a
// periodic parent, so a pin on one would hold shares for nothing.
// Children carry their parent's gate and are decided like any job;
// templates never are, and hold nothing.
func Template(job *api.Job) bool {
	return job.IsParameterized() || job.Periodic != nil
}

// DispatchedFrom is the parent of a dispatched child of a parameterized
// job (Nomad keeps the parent's ParameterizedJob block in the child, with
// Dispatched set, and its ID in ParentID).
func DispatchedFrom(job *api.Job) (string, bool) {
	if !job.Dispatched || job.ParameterizedJob == nil || job.ParentID == nil || *job.ParentID == "" {
		return "", false
	}
	return *job.ParentID, true
}

// Current reports whether allocation a runs job's current version: it was
// placed, or updated in place, by a plan after that version was
// registered (Nomad's raft indexes order the two), or, read from a
// listing, it names that version.
func Current(a *api.Allocation, job *api.Job) bool {
	if job.JobModifyIndex == nil || (a.CreateIndex == 0 && a.AllocModifyIndex == 0 && a.Job == nil) {
		return true // nothing to tell by: counted as current, as before versions were told apart
	}
	if a.Job != nil && a.Job.Version != nil && job.Version != nil && a.AllocModifyIndex == 0 {
		return *a.Job.Version >= *job.Version // a listing's stub: no scheduler index
	}
	return max(a.AllocModifyIndex, a.CreateIndex) >= *job.JobModifyIndex
}

// BatchDone reports whether a batch group already finished its work:
// every allocation of its count ended in the job's current version —
// completed, or failed with no reschedule left (FailedForGood) — and none
// of it still runs. Its pinned shares are free again and it is not placed
// again. A group of count > 1 one of whose allocations completed is not
// done: Nomad's reconciler counts a completed allocation as one of the
// count (among the untainted) and still places the rest; nor is one with
// a failed allocation Nomad still reschedules. Allocations of older
// versions are ignored, as Nomad's reconciler ignores them: a batch job
// run again under the same ID runs again.
func (s *State) BatchDone(job *api.Job, group string) bool {
	tg := pin.Group(job, group)
	if tg == nil || !pin.Batch(job) {
		return false
	}
	key := KeyOf(job, group)
	complete, failed := Ended(s, job, key)
	done := complete + failed
	return done > 0 && done >= pin.Count(tg) && len(s.GroupAllocs(key.Namespace, key.Job, key.Group)) == 0
}

// Ended counts the allocations of a batch group's current version that
// are one of its count and will not run again (0 for any other job), as
// Nomad's reconciler counts them: those that completed, and those that
// failed with no reschedule left (FailedForGood). One Nomad still
// reschedules, or lost with its node, is not: Nomad replaces it.
func Ended(s *State, job *api.Job, key decide.Key) (complete, failed int) {
	if !pin.Batch(job) {
		return 0, 0
	}
	for _, a := range s.indexes.groups(s.Allocs).all[key] {
		switch {
		case !Current(a, job):
		case a.ClientStatus == api.AllocClientStatusComplete:
			complete++
		case FailedForGood(a, job):
			failed++
		}
	}
	return complete, failed
}

// AllAllocs returns every allocation of a job's group the state holds, of
// every version, live or terminal, by ID.
func (s *State) AllAllocs(namespace, job, group string) []*api.Allocation {
	return s.indexes.groups(s.Allocs).all[decide.Key{Namespace: orDefault(namespace), Job: job, Group: group}]
}

// Missing returns a group's live allocations and how many more it asks
// for, as Nomad's reconciler counts them: the count less what runs and,
// for a batch group, less what ended in the current version (Ended:
// completed, or failed with no reschedule left; none missing once it has
// finished).
func (s *State) Missing(job *api.Job, tg *api.TaskGroup) ([]*api.Allocation, int) {
	key := KeyOf(job, *tg.Name)
	live := s.GroupAllocs(key.Namespace, key.Job, key.Group)
	complete, failed := Ended(s, job, key)
	return live, max(pin.Count(tg)-len(live)-complete-failed, 0)
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
