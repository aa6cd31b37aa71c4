package model

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The placement core sees a node's shared GPUs only: MIG instances are
// Nomad's to place, so a MIG-enabled GPU is no GPU of the core's, and an
// allocation holding an instance holds no share (its CPU and memory still
// count).
func TestMIGInstancesAreNotTheCoresGPUs(t *testing.T) {
	n := pcieNode(t, "n1")
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	for _, g := range devicefn.MIGGroups(&st.Inventory, nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare-mig", Name: g.Profile, Attributes: nomadattr.ToAPI(g.Attributes())}
		for _, inst := range g.Instances {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: inst.UUID, Healthy: false})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	node, err := NodeOf(n)
	must.NoError(t, err)
	must.SliceLen(t, 4, node.GPUs) // the PCIe node's own four
	must.SliceEmpty(t, UnhealthyGPUs(n))

	a := shareAlloc("a1", "mig-job", "n1", 0, 0)
	a.AllocatedResources.Tasks["t"].Devices = []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare-mig", Name: "3g.20gb",
		DeviceIDs: []string{"MIG-a2000000-0000-4000-8000-000000000001"}}}
	must.SliceEmpty(t, Shares(a))
	must.Eq(t, int64(100), Resources(a).CPU)
}

// Shared MIG instances (mig_instances = "shared") are the core's GPUs:
// each of its own shares, under its parent, and an allocation on one
// holds its shares.
func TestSharedMIGInstancesAreTheCoresGPUs(t *testing.T) {
	const mig3g = "MIG-a2000000-0000-4000-8000-000000000001"
	n := pcieNode(t, "n1")
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
		for _, gpu := range g.GPUs {
			for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
				d.Instances = append(d.Instances, &api.NodeDevice{ID: id, Healthy: gpu.UUID != mig3g})
			}
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	node, err := NodeOf(n)
	must.NoError(t, err)
	must.SliceLen(t, 4+5, node.GPUs)
	var inst *placement.GPU
	for i := range node.GPUs {
		if node.GPUs[i].UUID == mig3g {
			inst = &node.GPUs[i]
		}
	}
	must.NotNil(t, inst)
	must.Eq(t, 42, inst.Cap)
	must.Eq(t, 42, inst.Free())
	must.Eq(t, "GPU-a2000000-0000-4000-8000-000000000000", inst.Parent())
	must.Eq(t, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", inst.Model)
	must.False(t, inst.Whole())
	must.Eq(t, []string{mig3g}, UnhealthyGPUs(n))

	a := shareAlloc("a1", "job", "n1", 0, 0)
	a.AllocatedResources.Tasks["t"].Devices = []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
		DeviceIDs: []string{mig3g + ":1", mig3g + ":0"}}}
	must.Eq(t, []string{mig3g + ":0", mig3g + ":1"}, Shares(a))
	s := placement.NewSnapshot()
	must.NoError(t, s.AddNode(node))
	must.NoError(t, s.AddAlloc(placement.Alloc{ID: "a1", Node: node.ID, Shares: Shares(a)}))
	must.Eq(t, 40, inst.Free())
}
