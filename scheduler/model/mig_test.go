package model

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The placement core sees a node's shared GPUs only: MIG instances are
// Nomad's to place, so a MIG-enabled GPU is no GPU of the core's, and an
// allocation holding an instance holds no share (its CPU and memory still
// count).
func TestMIGInstancesAreNotTheCoresGPUs(t *testing.T) {
	n := pcieNode(t, "n1")
	src, err := fixtures.FS.ReadFile(fixtures.A100MIG)
	must.NoError(t, err)
	st, err := fixture.Parse("a100-mig", src)
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
