package model

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func ptr[T any](v T) *T { return &v }

const gpu0 = "GPU-p1000000-0000-4000-8000-000000000000"

// pcieNode is what Nomad reports for a client with the 4-GPU PCIe fixture.
func pcieNode(t *testing.T, id string) *api.Node {
	src, err := fixtures.FS.ReadFile(fixtures.PCIe4GPU)
	must.NoError(t, err)
	st, err := fixture.Parse("pcie", src)
	must.NoError(t, err)
	g := devicefn.Groups(&st.Inventory, 100, "mps", nil)[0]
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
	return &api.Node{ID: id, Name: id, Status: "ready", SchedulingEligibility: "eligible", ModifyIndex: 5,
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 8000}, Memory: api.NodeMemoryResources{MemoryMB: 16384},
			Devices: []*api.NodeDeviceResource{d}}}
}

func shareAlloc(id, job, node string, from, to int) *api.Allocation {
	var ids []string
	for k := from; k < to; k++ {
		ids = append(ids, fmt.Sprintf("%s:%d", gpu0, k))
	}
	return &api.Allocation{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: node, DesiredStatus: "run", ClientStatus: "running", ModifyIndex: 10,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu: api.AllocatedCpuResources{CpuShares: 100}, Memory: api.AllocatedMemoryResources{MemoryMB: 128},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: ids}},
		}}}}
}

func gatedJob(id string, shares uint64) *api.Job {
	return &api.Job{ID: ptr(id), Namespace: ptr("default"), Type: ptr("service"), ModifyIndex: ptr(uint64(3)), JobModifyIndex: ptr(uint64(3)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(1), Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(128),
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptr(shares)}}}}}}}}
}

func TestSnapshotCountsAllocationsAndHolds(t *testing.T) {
	s := New()
	s.PutNode(pcieNode(t, "n1"))
	s.PutAlloc(shareAlloc("a1", "running", "n1", 0, 30))
	// a pinned job whose allocation does not exist yet holds its shares
	pinned := gatedJob("pinned", 20)
	_, err := pin.Pin(pinned, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
		{Node: "n1", GPUs: []string{gpu0}, Shares: []string{gpu0 + ":30", gpu0 + ":31"}},
	}})
	must.NoError(t, err)
	s.PutJob(pinned)
	b := s.Snapshot(nil, nil)
	snap, problems := b.Snapshot, b.Problems
	must.SliceEmpty(t, problems)
	n, ok := snap.Node("n1")
	must.True(t, ok)
	must.Eq(t, 68, n.GPUs[0].Free())
	must.Eq(t, placement.Resources{CPU: 8000 - 200, MemoryMiB: 16384 - 256}, n.Free())

	// once the allocation appears the hold goes
	s.PutAlloc(shareAlloc("a2", "pinned", "n1", 30, 32))
	snap = s.Snapshot(nil, nil).Snapshot
	n, _ = snap.Node("n1")
	must.Eq(t, 68, n.GPUs[0].Free())
	_, isHold := snap.Alloc(PendingPrefix + "default/pinned/g@n1")
	must.False(t, isHold)

	// allocations reported gone (preempted) free their shares
	snap = s.Snapshot(nil, func(id string) bool { return id == "a1" }).Snapshot
	n, _ = snap.Node("n1")
	must.Eq(t, 98, n.GPUs[0].Free())
}

func TestUnusableNodesAreLeftOut(t *testing.T) {
	s := New()
	down := pcieNode(t, "down")
	down.Status = "down"
	drained := pcieNode(t, "drained")
	drained.SchedulingEligibility = "ineligible"
	s.PutNode(down)
	s.PutNode(drained)
	s.PutNode(pcieNode(t, "up"))
	snap := s.Snapshot(nil, nil).Snapshot
	must.SliceLen(t, 1, snap.Nodes())
}

func TestStaleEventsDoNotOverwrite(t *testing.T) {
	s := New()
	newer := gatedJob("j", 10)
	newer.ModifyIndex = ptr(uint64(9))
	s.PutJob(newer)
	older := gatedJob("j", 20)
	older.ModifyIndex = ptr(uint64(4))
	s.PutJob(older)
	must.Eq(t, uint64(9), *s.Jobs["default/j"].ModifyIndex)

	a := shareAlloc("a", "j", "n1", 0, 10)
	s.PutAlloc(a)
	stale := *a
	stale.ModifyIndex = 2
	stale.ClientStatus = "pending"
	s.PutAlloc(&stale)
	must.Eq(t, "running", s.Allocs["a"].ClientStatus)

	// an update without resources keeps the devices
	upd := *a
	upd.ModifyIndex = 20
	upd.ClientStatus = "complete"
	upd.AllocatedResources = nil
	s.PutAlloc(&upd)
	must.SliceLen(t, 10, Shares(s.Allocs["a"]))
	must.False(t, Live(s.Allocs["a"]))

	s.DeleteJob("default", "j")
	must.MapEmpty(t, s.Allocs)
}

func TestBrokenNodeAttributesAreAProblem(t *testing.T) {
	s := New()
	n := pcieNode(t, "bad")
	delete(n.NodeResources.Devices[0].Attributes, "gpus")
	s.PutNode(n)
	b := s.Snapshot(nil, nil)
	snap, problems := b.Snapshot, b.Problems
	must.SliceEmpty(t, snap.Nodes())
	must.SliceLen(t, 1, problems)
	must.StrContains(t, problems[0], `attribute "gpus": missing`)
}

// A pinned group holds its shares only on the nodes the current version
// of its job still allows (State.Feasible): elsewhere Nomad places
// nothing, so nothing is held, and the group is short of its pinned shares.
func TestHoldsOnlyWhereTheJobsRulesAllow(t *testing.T) {
	for _, allow := range []bool{true, false} {
		s := New()
		s.PutNode(pcieNode(t, "n1"))
		pinned := gatedJob("pinned", 2)
		_, err := pin.Pin(pinned, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
			{Node: "n1", GPUs: []string{gpu0}, Shares: []string{gpu0 + ":30", gpu0 + ":31"}},
		}})
		must.NoError(t, err)
		s.PutJob(pinned)
		var asked []string
		s.Feasible = func(job *api.Job, group string) func(string) bool {
			asked = append(asked, *job.ID+"/"+group)
			return func(node string) bool { return allow }
		}
		b := s.Snapshot(nil, nil)
		must.Eq(t, []string{"pinned/g"}, asked)
		_, held := b.Snapshot.Alloc(PendingPrefix + "default/pinned/g@n1")
		must.Eq(t, allow, held)
		must.Eq(t, !allow, b.Short[KeyOf(pinned, "g")])
	}
}
