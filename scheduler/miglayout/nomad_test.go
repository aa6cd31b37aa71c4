package miglayout

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// migNode is what Nomad's API returns for a client of the A100 MIG
// fixture, its instances whole or shared, with a whole V100-like group of
// spg shares beside them when spg > 0.
func migNode(t *testing.T, name, mode string, profiles []devicefn.MIGProfile) *api.Node {
	t.Helper()
	src, err := fixtures.FS.ReadFile(fixtures.A100MIG)
	must.NoError(t, err)
	st, err := fixture.Parse(fixtures.A100MIG, src)
	must.NoError(t, err)
	for i := range st.Inventory.GPUs {
		st.Inventory.GPUs[i].MIGProfiles = profiles
	}
	n := &api.Node{ID: name + "-id", Name: name, NodeResources: &api.NodeResources{}}
	if mode == devicefn.MIGShared {
		for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
			d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
			n.NodeResources.Devices = append(n.NodeResources.Devices, d)
		}
		return n
	}
	for _, g := range devicefn.MIGGroups(&st.Inventory, nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare-mig", Name: g.Profile, Attributes: nomadattr.ToAPI(g.Attributes())}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	return n
}

func holding(id, node, typ string, ids ...string) *api.Allocation {
	return &api.Allocation{ID: id, NodeID: node, ClientStatus: "running", DesiredStatus: "run",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, DeviceIDs: ids}}},
		}}}
}

const (
	mig3  = "MIG-a2000000-0000-4000-8000-000000000001"
	mig7  = "MIG-a2000000-0000-4000-8000-000000000011"
	gpu0  = "GPU-a2000000-0000-4000-8000-000000000000"
	a100M = "NVIDIA A100-SXM4-40GB"
)

func TestFromNomadWholeAndShared(t *testing.T) {
	plain := &api.Node{ID: "v-id", Name: "v100", NodeResources: &api.NodeResources{}}
	nodes, problems := FromNomad([]*api.Node{migNode(t, "whole", devicefn.MIGWhole, a100), migNode(t, "shared", devicefn.MIGShared, nil), plain},
		[]*api.Allocation{holding("a1", "whole-id", "gpushare-mig", mig3), holding("a2", "shared-id", "gpushare", mig7+":0", mig7+":1", mig7+":2"),
			{ID: "done", ClientStatus: "complete", AllocatedResources: holding("x", "whole-id", "gpushare-mig", mig7).AllocatedResources}})
	must.SliceEmpty(t, problems)
	must.SliceLen(t, 2, nodes) // the node without MIG is left out
	must.Eq(t, "shared", nodes[0].Name)
	sh := nodes[0].Models[0]
	must.Eq(t, a100M, sh.Model)
	must.Eq(t, 7, sh.ParentSlices)
	must.SliceEmpty(t, sh.Profiles)
	must.SliceLen(t, 2, sh.GPUs)
	must.Eq(t, gpu0, sh.GPUs[0].UUID)
	must.Eq(t, devicefn.MIGShared, sh.GPUs[0].Mode)
	must.SliceLen(t, 4, sh.GPUs[0].Instances)
	must.Eq(t, []Instance{{UUID: mig7, Profile: "7g.40gb", Slices: 7, Used: 3}}, sh.GPUs[1].Instances)

	wh := nodes[1].Models[0]
	must.Eq(t, a100, wh.Profiles)
	must.Eq(t, devicefn.MIGWhole, wh.GPUs[0].Mode)
	must.Eq(t, 100, wh.GPUs[0].SharesPerGPU)
	must.True(t, wh.GPUs[0].Busy())
	must.False(t, wh.GPUs[1].Busy()) // the complete allocation holds nothing

	rs := Recommend(nodes, []Demand{shares(14, 3)}, DefaultOptions)
	must.SliceLen(t, 2, rs)
	must.Eq(t, "shared", rs[0].Node)
	must.Eq(t, 1, rs[0].Busy)
	must.False(t, rs[0].Change) // shared: the 7g and 3g+2g+1g+1g both hold seven 14s
	must.Eq(t, "whole", rs[1].Node)
	must.True(t, rs[1].Change)
	must.Eq(t, "1g.5gb ×7", Format(rs[1].Recommended))
	must.Eq(t, 126.0, rs[1].Saving.Shares)

	// an attribute that does not decode is a problem, not a crash
	bad := migNode(t, "bad", devicefn.MIGWhole, nil)
	bad.NodeResources.Devices[0].Attributes["instances"] = &api.Attribute{StringVal: new("x")}
	_, problems = FromNomad([]*api.Node{bad}, nil)
	must.SliceLen(t, 1, problems)
}

func TestTaskGroupDemand(t *testing.T) {
	tg := &api.TaskGroup{Tasks: []*api.Task{
		{Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare-mig/3g.20gb"}, {Name: "nvidia/gpushare", Count: new(uint64(25))}}}},
		{Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare-mig", Count: new(uint64(2)),
			Constraints: []*api.Constraint{{LTarget: "${device.attr.profile}", RTarget: "1g.5gb"}}}}}},
		{Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare-mig"}}}}, // no profile: left out
		{},
	}}
	must.Eq(t, []Demand{{Profile: "3g.20gb", Weight: 3}, {Profile: "1g.5gb", Weight: 6}}, TaskGroupDemand(tg, 3))
	must.SliceEmpty(t, TaskGroupDemand(tg, 0))
}
