package model

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fullAlloc is allocation id as a full read or an event gives it: its
// whole job (at version), task states with their events, the plan's
// metrics, networks and ports, and strings of its own (decoded from JSON,
// not shared with the model's node and job).
func fullAlloc(id string, job *api.Job, version uint64) *api.Allocation {
	a := shareAlloc(id, strings.Clone(*job.ID), strings.Clone("n1"), 0, 10)
	a.Namespace, a.TaskGroup = strings.Clone("default"), strings.Clone("g")
	a.ClientStatus, a.DesiredStatus = strings.Clone("running"), strings.Clone("run")
	a.CreateIndex, a.ModifyIndex, a.CreateTime = 5, 12, time.Unix(100, 0).UnixNano()
	j := *job
	j.Version = &version
	a.Job = &j
	started := time.Unix(200, 0)
	a.TaskStates = map[string]*api.TaskState{
		"t":    {State: "running", StartedAt: started, Events: []*api.TaskEvent{{Type: "Started", Details: map[string]string{"k": "v"}}}},
		"init": {State: "pending"},
	}
	a.Metrics = &api.AllocationMetric{NodesEvaluated: 100, ScoreMetaData: []*api.NodeScoreMeta{{NodeID: "n1"}}}
	a.AllocatedResources.Shared = api.AllocatedSharedResources{DiskMB: 300, Ports: []api.PortMapping{{Label: "http", Value: 8080}}}
	a.AllocatedResources.Tasks["t"].Networks = []*api.NetworkResource{{Mode: "host"}}
	a.Services = map[string]string{"web": "x"}
	return a
}

// A stored allocation keeps only what the scheduler reads of it: its job
// reduced to the version it runs (one object per version, shared), the
// start of each task, its CPU, memory and shares; strings it shares with
// the model's node and job are theirs. What read the dropped fields reads
// the same from the model: whether it runs the current version, its
// shares, resources and start, and the snapshot built from it.
func TestStoredAllocationsKeepOnlyWhatIsRead(t *testing.T) {
	s := New()
	s.PutNode(pcieNode(t, "n1"))
	job := gatedJob("j", 10)
	job.TaskGroups[0].Constraints = nil
	job.Version = ptr(uint64(4))
	s.PutJob(job)

	a, b := fullAlloc("a1", job, 4), fullAlloc("b1", job, 4)
	b.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs = shareAlloc("", "", "", 10, 20).AllocatedResources.Tasks["t"].Devices[0].DeviceIDs
	s.PutAlloc(a)
	s.PutAlloc(b)
	got := s.Allocs["a1"]

	must.NotNil(t, got.Job)
	must.Eq(t, uint64(4), *got.Job.Version)
	must.Nil(t, got.Job.ID, must.Sprint("the job is the model's, not a copy per allocation"))
	must.Nil(t, got.Job.TaskGroups)
	must.True(t, got.Job == s.Allocs["b1"].Job, must.Sprint("one version object for all"))
	for _, agr := range []struct{ modify, alloc uint64 }{{12, 0}, {12, 20}, {2, 0}} {
		a.ModifyIndex, a.AllocModifyIndex = agr.modify, agr.alloc
		g := s.slimAlloc(a, nil)
		must.Eq(t, Current(a, job), Current(g, job))
	}

	must.Nil(t, got.Metrics)
	must.MapEmpty(t, got.Services)
	must.Eq(t, api.AllocatedSharedResources{}, got.AllocatedResources.Shared)
	must.Nil(t, got.AllocatedResources.Tasks["t"].Networks)
	must.MapLen(t, 1, got.TaskStates)
	must.Nil(t, got.TaskStates["t"].Events)
	must.Eq(t, time.Unix(200, 0), got.TaskStates["t"].StartedAt)

	must.Eq(t, Shares(a), Shares(got))
	must.Eq(t, Resources(a), Resources(got))
	must.Eq(t, a.CreateTime, got.CreateTime)
	must.Eq(t, a.CreateIndex, got.CreateIndex)
	must.True(t, Live(got))

	// interned: the node's and the job's strings, and Nomad's statuses
	must.True(t, unsafe.StringData(got.NodeID) == unsafe.StringData(s.Nodes["n1"].ID))
	must.True(t, unsafe.StringData(got.JobID) == unsafe.StringData(*job.ID))
	must.True(t, unsafe.StringData(got.TaskGroup) == unsafe.StringData(*job.TaskGroups[0].Name))
	must.True(t, unsafe.StringData(got.ClientStatus) == unsafe.StringData(api.AllocClientStatusRunning))

	// the snapshot's mark of an allocation shares the snapshot's shares
	built := s.Snapshot(nil, nil)
	in, ok := built.Snapshot.Alloc("a1")
	must.True(t, ok)
	must.Eq(t, Shares(a), in.Shares)
	kept := s.SharesOf(got)
	must.True(t, unsafe.SliceData(kept) == unsafe.SliceData(in.Shares), must.Sprint("one copy of the shares, not two"))

	// an event without resources keeps the slimmed ones read before
	ev := fullAlloc("a1", job, 4)
	ev.AllocatedResources, ev.ModifyIndex = nil, 13
	s.PutAlloc(ev)
	must.True(t, s.Allocs["a1"].AllocatedResources == got.AllocatedResources)
}

// A relist reads every allocation again: one read again unchanged keeps
// the object the model holds (the snapshot was made from it), and is not
// looked at again; a change at the same index still replaces it.
func TestAnAllocationReadAgainUnchangedIsKept(t *testing.T) {
	s := New()
	s.PutNode(pcieNode(t, "n1"))
	job := gatedJob("j", 10)
	s.PutJob(job)
	s.PutAlloc(fullAlloc("a1", job, 0))
	held := s.Allocs["a1"]
	s.changed.take()
	s.PutAlloc(fullAlloc("a1", job, 0))
	must.True(t, held == s.Allocs["a1"])
	must.MapEmpty(t, s.changed.take().allocs)
	again := fullAlloc("a1", job, 0)
	again.ClientStatus = api.AllocClientStatusComplete
	s.PutAlloc(again)
	must.Eq(t, api.AllocClientStatusComplete, s.Allocs["a1"].ClientStatus)
	must.False(t, Live(s.Allocs["a1"]))
}

// A listing's allocation names the version it runs and nothing else of
// its job; stored, it tells the current version from an older one as the
// listing did (Current), and its job is the shared one of its version.
func TestListedAllocationsShareTheirVersion(t *testing.T) {
	s := New()
	job := gatedJob("j", 10)
	job.Version = ptr(uint64(2))
	s.PutJob(job)
	for i, v := range []uint64{1, 2, 2} {
		st := &api.AllocationListStub{ID: string(rune('a' + i)), Namespace: "default", JobID: "j", TaskGroup: "g", NodeID: "n1",
			DesiredStatus: "run", ClientStatus: "running", JobVersion: v, ModifyIndex: 10}
		s.PutAlloc(FromStub(st))
		must.Eq(t, v >= 2, Current(s.Allocs[st.ID], job))
	}
	must.True(t, s.Allocs["b"].Job == s.Allocs["c"].Job)
	must.False(t, s.Allocs["a"].Job == s.Allocs["b"].Job)
}

// A stored node keeps what constraints, the snapshot and the views read
// of it, not its event history, links, networks or driver details, and
// the snapshot built from it is the one its full copy gives.
func TestStoredNodesKeepOnlyWhatIsRead(t *testing.T) {
	full := pcieNode(t, "n1")
	full.Datacenter, full.NodeClass, full.NodePool = "dc1", "gpu", "default"
	full.Attributes, full.Meta = map[string]string{"kernel.name": "linux"}, map[string]string{"rack": "r1"}
	full.Drivers = map[string]*api.DriverInfo{"docker": {Detected: true, Healthy: true, Attributes: map[string]string{"driver.docker.version": "27"}}, "exec": nil}
	full.HostVolumes = map[string]*api.HostVolumeInfo{"data": {Path: "/data", ReadOnly: true}}
	full.Events = []*api.NodeEvent{{Message: "registered", Details: map[string]string{"k": "v"}}}
	full.Links = map[string]string{"aws.ec2": "i-1"}
	full.NodeResources.Networks = []*api.NetworkResource{{Mode: "host", IP: "10.0.0.1"}}
	full.ModifyIndex = 9
	s := New()
	s.PutNode(full)
	got := s.Nodes["n1"]
	must.Nil(t, got.Events)
	must.MapEmpty(t, got.Links)
	must.Nil(t, got.NodeResources.Networks)
	must.Eq(t, &api.DriverInfo{Detected: true, Healthy: true}, got.Drivers["docker"])
	must.Nil(t, got.Drivers["exec"])
	must.MapContainsKey(t, got.Drivers, "exec")
	for _, same := range [][2]any{{full.Datacenter, got.Datacenter}, {full.NodeClass, got.NodeClass}, {full.NodePool, got.NodePool},
		{full.Attributes, got.Attributes}, {full.Meta, got.Meta}, {full.HostVolumes, got.HostVolumes}, {full.Status, got.Status},
		{full.SchedulingEligibility, got.SchedulingEligibility}, {full.ModifyIndex, got.ModifyIndex}, {full.NodeResources.Devices, got.NodeResources.Devices},
		{full.NodeResources.Cpu, got.NodeResources.Cpu}, {full.NodeResources.Memory, got.NodeResources.Memory}} {
		must.Eq(t, same[0], same[1])
	}
	want, err := NodeOf(full)
	must.NoError(t, err)
	have, err := NodeOf(got)
	must.NoError(t, err)
	must.Eq(t, want, have)
	must.True(t, Usable(got))
}

// nomadShaped is an allocation as Nomad's API gives it in a full read,
// as JSON: its whole job (with the defaults Nomad fills in), task states
// with their events, the plan's metrics, networks and ports.
func nomadShaped(tb testing.TB) []byte {
	job := gatedJob("j", 25)
	job.Canonicalize()
	a := shareAlloc("a", "j", "0a1b2c3d-0000-4000-8000-000000000001", 0, 25)
	a.Job = job
	ev := func(kind string) *api.TaskEvent {
		return &api.TaskEvent{Type: kind, Time: 1, DisplayMessage: "Task " + kind, Details: map[string]string{"message": kind}}
	}
	a.TaskStates = map[string]*api.TaskState{"t": {State: "running", StartedAt: time.Unix(200, 0),
		Events: []*api.TaskEvent{ev("Received"), ev("Task Setup"), ev("Driver"), ev("Started")}}}
	a.Metrics = &api.AllocationMetric{NodesEvaluated: 100, NodesAvailable: map[string]int{"dc1": 100},
		ScoreMetaData: []*api.NodeScoreMeta{{NodeID: "0a1b2c3d-0000-4000-8000-000000000001", Scores: map[string]float64{"binpack": 0.5}, NormScore: 0.5}}}
	a.AllocatedResources.Shared = api.AllocatedSharedResources{DiskMB: 300, Networks: []*api.NetworkResource{{Mode: "host", IP: "10.0.0.1"}}}
	b, err := json.Marshal(a)
	must.NoError(tb, err)
	return b
}

// BenchmarkStoredAllocation reports the heap an allocation read from
// Nomad costs in the model (KiB/alloc), kept as Nomad gave it (whole: a
// full read's, with its job; event: an event's, which Nomad sends without
// the job) and as PutAlloc keeps it (slim), each decoded from its own JSON
// as the watcher's are.
func BenchmarkStoredAllocation(b *testing.B) {
	src := nomadShaped(b)
	for _, kind := range []string{"whole", "event", "slim"} {
		slim := kind == "slim"
		b.Run(kind, func(b *testing.B) {
			const n = 5000
			var perAlloc float64
			for range b.N {
				s := New()
				s.PutJob(gatedJob("j", 25))
				before := heapBytes()
				for i := range n {
					var a *api.Allocation
					must.NoError(b, json.Unmarshal(src, &a))
					a.ID = fmt.Sprintf("alloc-%05d", i)
					if kind == "event" {
						a.Job = nil
					}
					if slim {
						s.PutAlloc(a)
					} else {
						s.setAlloc(a)
					}
				}
				perAlloc = float64(heapBytes()-before) / n / 1024
				runtime.KeepAlive(s)
			}
			b.ReportMetric(perAlloc, "KiB/alloc")
		})
	}
}

// heapBytes is the heap in use after a collection.
func heapBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A pinned allocation's shares are the strings of its group's pin as the
// model parsed it, not copies of their own (equal, in the allocation's
// order); shares the pin does not name stay the allocation's.
func TestStoredSharesAreThePinsStrings(t *testing.T) {
	s := New()
	s.PutNode(pcieNode(t, "n1"))
	job := gatedJob("j", 10)
	var shares []string
	for k := range 10 {
		shares = append(shares, fmt.Sprintf("%s:%d", gpu0, k))
	}
	_, err := pin.Pin(job, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{{Node: "n1", GPUs: []string{gpu0}, Shares: shares}}})
	must.NoError(t, err)
	s.PutJob(job)
	a := fullAlloc("a1", job, 0)
	ids := a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs
	ids[0], ids[1] = ids[1], ids[0]
	ids[9] = gpu0 + ":99" // not the pin's
	s.PutAlloc(a)
	rec, ok := s.Record(job, "g")
	must.True(t, ok)
	got := s.Allocs["a1"].AllocatedResources.Tasks["t"].Devices[0].DeviceIDs
	must.Eq(t, ids, got)
	must.True(t, unsafe.StringData(got[0]) == unsafe.StringData(rec.Shares[1]))
	must.True(t, unsafe.StringData(got[2]) == unsafe.StringData(rec.Shares[2]))
	must.True(t, unsafe.StringData(got[9]) == unsafe.StringData(ids[9]))
}
