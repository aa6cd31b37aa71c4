package service

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A node-pinned batch group of two whose allocations Nomad put on GPUs
// other than those its record expected (Nomad takes the first GPU with
// room in a pinned node's cell order, the record names what the policy
// chose), the recorded shares since taken by another job: one allocation
// fails with a reschedule attempt left. Its node has room (the GPU it
// freed), so Nomad reschedules it there: the group is left pinned, not
// pinned again — a new version of a batch job would make Nomad run again
// what ended (it ignores an older version's terminal allocations).
func TestANodePinnedBatchFailureIsLeftToNomadsReschedule(t *testing.T) {
	j := gated("etl", 25)
	j.Type = ptr("batch")
	j.TaskGroups[0].Count = ptr(2)
	nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
	filler := gated("filler", 25)
	filler.TaskGroups[0].Constraints = nil // Nomad's alone
	f, s, rec := placedFirst(t, j, nodes...)
	must.Eq(t, pin.ContractNode, rec.Contract)
	f.put(filler)
	ran, err := copyJob(f.jobs["etl"])
	must.NoError(t, err)
	var ids = map[string]string{"node-1": "alloc-a", "node-2": "alloc-b"}
	for _, n := range nodes {
		recorded := sharesOn(t, f, rec, n.ID)
		must.Len(t, 25, recorded)
		sid, err := devicefn.ParseShareID(recorded[0])
		must.NoError(t, err)
		var other string // a GPU of the node the record does not name
		for _, u := range gpuUUIDs(t, n) {
			if u != sid.UUID {
				other = u
				break
			}
		}
		took := make([]string, 25)
		for i := range took {
			took[i] = devicefn.ShareID{UUID: other, Index: i}.String()
		}
		f.setAlloc("etl", ids[n.ID], n.ID, took, "running", "run")
		f.setAlloc("filler", "filler-"+n.ID, n.ID, recorded, "running", "run")
	}
	f.mu.Lock()
	for _, a := range f.allocs {
		if a.JobID == "etl" {
			a.Job = ran
		}
	}
	f.mu.Unlock()
	onePass(t, s)
	must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
	registers := f.registers

	f.failAlloc("alloc-a", time.Unix(900, 0).UTC())
	onePass(t, s)
	st := stageOf(s, "etl")
	must.Eq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
	must.Eq(t, registers, f.registers, must.Sprint("pinned again: a new version, Nomad would run again what ended"))

	// the control: every GPU of the pinned nodes taken, the pin is short
	// for good and the group is decided again (elsewhere: nowhere here)
	taken := map[string]bool{} // what Nomad's allocations hold (the model's holds are not Nomad's)
	f.mu.Lock()
	for _, a := range f.allocs {
		if a.ClientStatus == "running" {
			for _, sh := range a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs {
				taken[sh] = true
			}
		}
	}
	f.mu.Unlock()
	for _, n := range nodes {
		for _, u := range gpuUUIDs(t, n) {
			var free []string
			for i := range 100 {
				if sh := (devicefn.ShareID{UUID: u, Index: i}).String(); !taken[sh] {
					free = append(free, sh)
				}
			}
			if len(free) > 0 {
				f.setAlloc("filler", "filler-"+u, n.ID, free, "running", "run")
			}
		}
	}
	f.setAlloc("etl", "alloc-b", "", nil, "running", "run") // the group read again
	onePass(t, s)
	st = stageOf(s, "etl")
	must.NotEq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
	must.StrContains(t, st.Why, "capacity its pin names is gone")
}

// nodePinRoom counts room as Nomad takes it on a pinned node: fractions
// on one GPU each, an allocation of several GPUs on wholly free GPUs of
// one node (8 on a DGX-1: four of 2, none of 9), an unhealthy GPU none.
func TestNodePinRoomCountsAsNomadTakes(t *testing.T) {
	n := perGPUNode(t, "node-1")
	f := &fakeNomad{nodes: []*api.Node{n}, jobs: map[string]*api.Job{}}
	s := loadedService(t, f)
	built := s.state.Snapshot(nil, nil)
	k := key("x")
	nodes := []string{"node-1"}
	must.True(t, nodePinRoom(built, k, nodes, 25, 32))
	must.False(t, nodePinRoom(built, k, nodes, 25, 33))
	must.True(t, nodePinRoom(built, k, nodes, 200, 4))
	must.False(t, nodePinRoom(built, k, nodes, 200, 5))
	must.False(t, nodePinRoom(built, k, nodes, 900, 1))
	must.False(t, nodePinRoom(built, k, []string{"gone"}, 25, 1))
	must.True(t, nodePinRoom(built, k, nodes, 25, 0))

	u := gpuUUIDs(t, n)[0]
	must.NoError(t, built.Snapshot.SetHealth(u, false))
	must.False(t, nodePinRoom(built, k, nodes, 25, 29), must.Sprint("an unhealthy GPU offers nothing"))
	must.True(t, nodePinRoom(built, k, nodes, 200, 3))
	must.False(t, nodePinRoom(built, k, nodes, 200, 4))
}
