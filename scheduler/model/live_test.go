package model

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// node i: the PCIe fixture with GPU UUIDs of its own, GPU bad unhealthy
// (-1: none).
func liveNode(t *testing.T, i, bad int, index uint64) *api.Node {
	src, err := fixtures.FS.ReadFile(fixtures.PCIe4GPU)
	must.NoError(t, err)
	st, err := fixture.Parse("pcie", src)
	must.NoError(t, err)
	for g := range st.Inventory.GPUs {
		st.Inventory.GPUs[g].UUID = fmt.Sprintf("GPU-%d-%d", i, g)
	}
	grp := devicefn.Groups(&st.Inventory, 100, "mps", nil)[0]
	d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: grp.Model, Attributes: nomadattr.ToAPI(grp.Attributes())}
	for g := range st.Inventory.GPUs {
		d.Instances = append(d.Instances, &api.NodeDevice{ID: fmt.Sprintf("GPU-%d-%d:0", i, g), Healthy: g != bad})
	}
	id := fmt.Sprintf("n%d", i)
	return &api.Node{ID: id, Name: id, Status: "ready", SchedulingEligibility: "eligible", ModifyIndex: index,
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 8000}, Memory: api.NodeMemoryResources{MemoryMB: 16384},
			Devices: []*api.NodeDeviceResource{d}}}
}

// The snapshot kept in step with the state is, after any sequence of
// changes, the snapshot a fresh build makes.
func TestLiveSnapshotMatchesAFreshBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	s := New()
	index := uint64(1)
	next := map[string]int{} // GPU UUID -> next free share
	gone := map[string]bool{}
	goneFn := func(id string) bool { return gone[id] }
	for i := range 3 {
		s.PutNode(liveNode(t, i, -1, index))
	}
	for j := range 4 {
		job := gatedJob(fmt.Sprintf("j%d", j), 10)
		job.TaskGroups[0].Constraints = nil
		s.PutJob(job)
	}
	for step := range 400 {
		index++
		switch op := rng.IntN(8); op {
		case 0: // a node leaves or comes back
			id := fmt.Sprintf("n%d", rng.IntN(3))
			if _, ok := s.Nodes[id]; ok {
				s.DeleteNode(id)
			} else {
				s.PutNode(liveNode(t, int(id[1]-'0'), -1, index))
			}
		case 1: // drained, or a GPU turns unhealthy
			i := rng.IntN(3)
			n := liveNode(t, i, rng.IntN(5)-1, index)
			n.Drain = rng.IntN(4) == 0
			s.PutNode(n)
		case 2, 3: // an allocation of 10 shares
			i, g := rng.IntN(3), rng.IntN(4)
			uuid := fmt.Sprintf("GPU-%d-%d", i, g)
			if next[uuid] >= 100 {
				continue
			}
			var ids []string
			for k := next[uuid]; k < next[uuid]+10; k++ {
				ids = append(ids, fmt.Sprintf("%s:%d", uuid, k))
			}
			next[uuid] += 10
			a := shareAlloc(fmt.Sprintf("a%03d", step), fmt.Sprintf("j%d", rng.IntN(4)), fmt.Sprintf("n%d", i), 0, 0)
			a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs = ids
			a.ModifyIndex = index
			s.PutAlloc(a)
		case 4: // an allocation ends
			ids := slices.Sorted(maps.Keys(s.Allocs))
			if len(ids) == 0 {
				continue
			}
			a := *s.Allocs[ids[rng.IntN(len(ids))]]
			a.ClientStatus, a.ModifyIndex = api.AllocClientStatusComplete, index
			s.PutAlloc(&a)
		case 5: // a job's class changes its allocations' attributes
			job := gatedJob(fmt.Sprintf("j%d", rng.IntN(4)), 10)
			job.TaskGroups[0].Constraints = nil
			job.Meta = map[string]string{pin.MetaClass: []string{"production", "opportunistic", ""}[rng.IntN(3)]}
			job.ModifyIndex = ptr(index)
			s.PutJob(job)
		case 6: // a preemption in flight
			ids := slices.Sorted(maps.Keys(s.Allocs))
			if len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				gone[id] = !gone[id]
			}
		case 7: // a learned profile
			s.Learn(fmt.Sprintf("default/j%d/g", rng.IntN(4)), interference.Profile{Name: "learned", SM: rng.Float64(), MemBW: rng.Float64()})
		}
		got := s.Snapshot(nil, goneFn)
		fresh := New()
		fresh.Nodes, fresh.Jobs, fresh.Allocs, fresh.Learned = s.Nodes, s.Jobs, s.Allocs, s.Learned
		want := fresh.Snapshot(nil, goneFn)
		must.Eq(t, want.Snapshot.Allocs(), got.Snapshot.Allocs(), must.Sprintf("step %d", step))
		wu, gu := want.Snapshot.Usage(), got.Snapshot.Usage()
		must.InDelta(t, wu.AllocatedGPUs, gu.AllocatedGPUs, 1e-9)
		wu.AllocatedGPUs, gu.AllocatedGPUs = 0, 0 // summed in another order
		must.Eq(t, wu, gu, must.Sprintf("step %d", step))
		must.Eq(t, downs(want.Snapshot), downs(got.Snapshot), must.Sprintf("step %d", step))
		must.NoError(t, got.Snapshot.Check())
	}
}

// downs lists the nodes and their GPUs' health.
func downs(s *placement.Snapshot) map[string][]bool {
	out := map[string][]bool{}
	for _, n := range s.Nodes() {
		for _, g := range n.GPUs {
			out[n.ID] = append(out[n.ID], g.Down)
		}
	}
	return out
}
