package gpumap

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A node whose plugin offers one device group per GPU shows as one node
// of its model, its GPUs in NVML order with their links within the model,
// as the same node with one group per model does.
func TestBuildPerGPUGroups(t *testing.T) {
	const gpu3 = "GPU-d1000000-0000-4000-8000-000000000003"
	today := node(t, "dgx1", fixtures.DGX1V100, "GPU-d1000000-0000-4000-8000-000000000007")
	per := &api.Node{ID: today.ID, Name: today.Name, Status: today.Status, NodeResources: &api.NodeResources{}}
	g, err := nomadattr.DecodeGroup(today.NodeResources.Devices[0])
	must.NoError(t, err)
	per.NodeResources.Devices = nomadattr.GPUDevices(g)
	for _, inst := range per.NodeResources.Devices[7].Instances {
		inst.Healthy, inst.HealthDescription = false, "XID 79"
	}
	allocs := []*api.Allocation{alloc("aaaaaaaa-1", "train", "running", gpu3, 0, 25)}
	want, got := Build([]*api.Node{today}, allocs), Build([]*api.Node{per}, allocs)
	must.SliceEmpty(t, got.Problems)
	must.SliceLen(t, 1, got.Nodes)
	must.True(t, got.Nodes[0].PerGPU)
	got.Nodes[0].PerGPU = false
	must.Eq(t, want, got)
	must.Eq(t, devicefn.GPUGroupName("Tesla V100-SXM2-16GB", 3), per.NodeResources.Devices[3].Name)
}
