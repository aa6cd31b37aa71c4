package model

import (
	"slices"

	"github.com/hashicorp/nomad/api"
)

// The model keeps every allocation of the cluster (100,000 at issue 30's
// 10,000 nodes) for as long as it lives, so it keeps only what the
// scheduler reads of one. An allocation from the event stream or a full
// read carries much more: its task states with their event histories,
// the placement metrics of the plan that made it, its services, networks,
// reschedule tracker and, from a full read, a copy of its whole job.
// Nothing in the scheduler, the CLI or the HTTP views reads those from the
// model (prior.go and promote.go read an allocation's job version from
// Nomad itself) but, of a failed allocation, when it failed, its
// reschedule tracker and replacement (FailedForGood), so PutAlloc stores
// a slimmed copy (slimAlloc): a reader of another field of a stored
// allocation must add it here.

// slimAlloc returns a copy of a with only the fields the scheduler reads
// of a stored allocation, sharing what the state already holds: the
// allocation's strings are the ones of its node and job where those are
// known (each allocation decoded from JSON has its own copies), its job is
// reduced to its version (what Current reads), and res, when not nil, are
// its resources already slimmed (the previous copy's: an allocation's
// devices never change).
func (s *State) slimAlloc(a *api.Allocation, res *api.AllocatedResources) *api.Allocation {
	if res == nil {
		res = slimResources(a.AllocatedResources, s.pinnedShares(a))
	}
	c := &api.Allocation{
		ID: a.ID, Name: a.Name, Namespace: a.Namespace, NodeID: a.NodeID, NodeName: a.NodeName, JobID: a.JobID, TaskGroup: a.TaskGroup,
		DesiredStatus: status(a.DesiredStatus), ClientStatus: status(a.ClientStatus),
		AllocatedResources: res, DeploymentStatus: a.DeploymentStatus, TaskStates: startedOnly(a.TaskStates),
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, AllocModifyIndex: a.AllocModifyIndex,
		CreateTime: a.CreateTime, ModifyTime: a.ModifyTime,
	}
	if a.ClientStatus == api.AllocClientStatusFailed {
		// whether Nomad reschedules it (FailedForGood): its tasks' finish,
		// its reschedule attempts, its replacement, how it is marked
		c.TaskStates = taskTimes(a.TaskStates)
		c.RescheduleTracker = slimTracker(a.RescheduleTracker)
		c.NextAllocation = a.NextAllocation
		c.DesiredTransition = api.DesiredTransition{Reschedule: a.DesiredTransition.Reschedule, ForceReschedule: a.DesiredTransition.ForceReschedule}
	}
	if a.Job != nil {
		c.Job = s.versions.of(a.Job.Version)
	}
	if n := s.Nodes[a.NodeID]; n != nil {
		c.NodeID = n.ID
		if n.Name == a.NodeName {
			c.NodeName = n.Name
		}
	}
	if j := s.Jobs[JobKey(a.Namespace, a.JobID)]; j != nil {
		c.JobID = *j.ID
		if j.Namespace != nil && *j.Namespace == a.Namespace {
			c.Namespace = *j.Namespace
		}
		for _, tg := range j.TaskGroups {
			if tg != nil && tg.Name != nil && *tg.Name == a.TaskGroup {
				c.TaskGroup = *tg.Name
				break
			}
		}
	}
	return c
}

// versions are the jobs reduced to a version (of) that stored allocations
// share, by version. The state's, filled as allocations are put, under
// the service's cluster.mu.
type versions map[uint64]*api.Job

// of returns a job that carries only version v (nil: none), one object
// per version shared by every allocation that runs it: the stored
// allocations are read, never changed. The table is cleared when it grows
// past a bound; objects already handed out stay valid.
func (vs *versions) of(v *uint64) *api.Job {
	key := ^uint64(0) // no version
	if v != nil {
		key = *v
	}
	if j, ok := (*vs)[key]; ok {
		return j
	}
	if *vs == nil || len(*vs) >= 4096 {
		*vs = map[uint64]*api.Job{}
	}
	j := &api.Job{}
	if v != nil {
		j.Version = &key
	}
	(*vs)[key] = j
	return j
}

// pinnedShares returns the shares the trusted pin of allocation a's group
// names (nil: none, or its job is not known yet): the model keeps them
// parsed (Record), one string each, which the allocation's device IDs,
// decoded anew from each event and listing, can share.
func (s *State) pinnedShares(a *api.Allocation) []string {
	job := s.Jobs[JobKey(a.Namespace, a.JobID)]
	if job == nil || a.AllocatedResources == nil {
		return nil
	}
	rec, ok := s.Record(job, a.TaskGroup)
	if !ok {
		return nil
	}
	return rec.Shares
}

// slimResources keeps of an allocation's resources what the snapshot and
// the views read: each task's CPU, memory and devices. The shared
// resources (ports, disk) and the tasks' networks are Nomad's business.
// Device IDs found in pinned (the shares of the group's pin) are those
// strings: an allocation's shares are most often its pin's.
func slimResources(r *api.AllocatedResources, pinned []string) *api.AllocatedResources {
	if r == nil {
		return nil
	}
	out := &api.AllocatedResources{Tasks: make(map[string]*api.AllocatedTaskResources, len(r.Tasks))}
	for name, tr := range r.Tasks {
		if tr == nil {
			out.Tasks[name] = nil
			continue
		}
		t := &api.AllocatedTaskResources{Cpu: tr.Cpu, Memory: tr.Memory}
		if len(tr.Devices) > 0 {
			t.Devices = make([]*api.AllocatedDeviceResource, len(tr.Devices))
			for i, d := range tr.Devices {
				if d != nil {
					t.Devices[i] = &api.AllocatedDeviceResource{Vendor: d.Vendor, Type: d.Type, Name: d.Name, DeviceIDs: sharedIDs(d.DeviceIDs, pinned)}
				}
			}
		}
		out.Tasks[name] = t
	}
	return out
}

// sharedIDs returns ids with each ID found in pinned replaced by
// pinned's string (equal, so nothing read changes), in a list of its
// own, or ids itself when none is found.
func sharedIDs(ids, pinned []string) []string {
	if len(pinned) > 4096 {
		return ids // a large group's pin: each look-up would cost too much
	}
	var out []string
	for i, id := range ids {
		k := slices.Index(pinned, id)
		if k < 0 {
			continue
		}
		if out == nil {
			out = slices.Clone(ids)
		}
		out[i] = pinned[k]
	}
	if out == nil {
		return ids
	}
	return out
}

// startedOnly keeps of the task states when each task started, the one
// thing read of them (when the allocation began to run); a task that has
// not started is left out, as its zero time would be.
func startedOnly(states map[string]*api.TaskState) map[string]*api.TaskState {
	var out map[string]*api.TaskState
	for name, ts := range states {
		if ts == nil || ts.StartedAt.IsZero() {
			continue
		}
		if out == nil {
			out = map[string]*api.TaskState{}
		}
		out[name] = &api.TaskState{StartedAt: ts.StartedAt}
	}
	return out
}

// taskTimes keeps of a failed allocation's task states when each task
// started and finished (FailedForGood reads when it failed).
func taskTimes(states map[string]*api.TaskState) map[string]*api.TaskState {
	var out map[string]*api.TaskState
	for name, ts := range states {
		if ts == nil || (ts.StartedAt.IsZero() && ts.FinishedAt.IsZero()) {
			continue
		}
		if out == nil {
			out = map[string]*api.TaskState{}
		}
		out[name] = &api.TaskState{StartedAt: ts.StartedAt, FinishedAt: ts.FinishedAt}
	}
	return out
}

// slimTracker keeps of a reschedule tracker when each attempt was made
// and how the last one went.
func slimTracker(rt *api.RescheduleTracker) *api.RescheduleTracker {
	if rt == nil {
		return nil
	}
	out := &api.RescheduleTracker{LastReschedule: rt.LastReschedule}
	if rt.Events != nil {
		out.Events = make([]*api.RescheduleEvent, 0, len(rt.Events))
		for _, e := range rt.Events {
			if e != nil {
				out.Events = append(out.Events, &api.RescheduleEvent{RescheduleTime: e.RescheduleTime})
			}
		}
	}
	return out
}

// status returns Nomad's own constant for an allocation status, so that
// the stored allocations share one copy of each rather than one per
// decoded allocation.
func status(st string) string {
	for _, known := range []string{api.AllocDesiredStatusRun, api.AllocDesiredStatusStop, api.AllocDesiredStatusEvict,
		api.AllocClientStatusPending, api.AllocClientStatusRunning, api.AllocClientStatusComplete,
		api.AllocClientStatusFailed, api.AllocClientStatusLost, api.AllocClientStatusUnknown} {
		if st == known {
			return known
		}
	}
	return st
}

// slimNode returns a copy of n with what the scheduler reads of a node:
// its identity and status, what Nomad's constraints are checked against
// (datacenter, class, pool, attributes, meta, drivers, host volumes) and
// its resources (CPU, memory and devices, less what is reserved). Its
// event history, links, networks, CSI plugins and drain strategy are
// Nomad's business: the node is read again whenever it changes.
func slimNode(n *api.Node) *api.Node {
	c := &api.Node{
		ID: n.ID, Name: n.Name, Datacenter: n.Datacenter, NodeClass: n.NodeClass, NodePool: n.NodePool,
		Drain: n.Drain, Status: n.Status, SchedulingEligibility: n.SchedulingEligibility,
		Attributes: n.Attributes, Meta: n.Meta, HostVolumes: n.HostVolumes, ReservedResources: n.ReservedResources,
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex,
	}
	if n.NodeResources != nil {
		c.NodeResources = &api.NodeResources{Cpu: n.NodeResources.Cpu, Memory: n.NodeResources.Memory, Devices: n.NodeResources.Devices}
	}
	if n.Drivers != nil {
		// whether each driver is detected and healthy (feasible.HasDriver);
		// its attributes are also the node's ("driver.<name>.*")
		c.Drivers = make(map[string]*api.DriverInfo, len(n.Drivers))
		for name, d := range n.Drivers {
			if d != nil {
				d = &api.DriverInfo{Detected: d.Detected, Healthy: d.Healthy}
			}
			c.Drivers[name] = d
		}
	}
	return c
}
