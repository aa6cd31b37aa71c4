package service

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// a100MIGShared is the A100 MIG fixture's node with the plugin's
// mig_instances = "shared": each instance a GPU of nvidia/gpushare.
func a100MIGShared(t *testing.T) *api.Node {
	t.Helper()
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	n := &api.Node{ID: "node-a100", Name: "a100", Status: "ready", SchedulingEligibility: "eligible", Datacenter: "dc1",
		Drivers:       map[string]*api.DriverInfo{"docker": {Detected: true, Healthy: true}},
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 20000}, Memory: api.NodeMemoryResources{MemoryMB: 65536}}}
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := nomadattr.Device(&g)
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	return n
}

// A device block's own constraints choose the device groups, not only the
// node: Nomad takes the shares from a group that matches them, so the
// scheduler pins shares of such a group only. A 14-share request would
// fill a 1g.5gb instance exactly, but constrained to 3g.20gb it is pinned
// to the 3g instance; constrained by memory on a node of two models, to
// the larger model.
func TestDeviceConstraintsChooseTheDeviceGroup(t *testing.T) {
	t.Run("a MIG profile", func(t *testing.T) {
		f := &fakeNomad{nodes: []*api.Node{a100MIGShared(t)}, jobs: map[string]*api.Job{}}
		j := gated("a", 14)
		j.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{
			{LTarget: "${device.attr.mig_profile}", Operand: "=", RTarget: "3g.20gb"}}
		f.put(j)
		free := gated("b", 14) // unconstrained: the exact fit
		f.put(free)
		s := newTestService(t, f)
		s.loop.reconcile(t.Context())
		rec, ok := pin.ParseRecord(f.jobs["a"], "g")
		must.True(t, ok)
		must.Eq(t, []string{"MIG-a2000000-0000-4000-8000-000000000001"}, rec.GPUs)
		rec, ok = pin.ParseRecord(f.jobs["b"], "g")
		must.True(t, ok)
		must.SliceLen(t, 1, rec.GPUs)
		must.True(t, strings.HasSuffix(rec.GPUs[0], "3") || strings.HasSuffix(rec.GPUs[0], "4"), must.Sprint(rec.GPUs)) // a 1g instance
	})
	t.Run("memory on a node of two models", func(t *testing.T) {
		n := dgx1As(t, "node-1", "dc1")
		big := *n.NodeResources.Devices[0]
		big.Name = "Tesla V100-SXM2-32GB"
		big.Attributes = map[string]*api.Attribute{}
		for k, a := range n.NodeResources.Devices[0].Attributes {
			big.Attributes[k] = a
		}
		big.Attributes["memory"] = &api.Attribute{IntVal: ptr(int64(32768)), Unit: "MiB"}
		big.Instances = nil
		for _, in := range n.NodeResources.Devices[0].Instances {
			big.Instances = append(big.Instances, &api.NodeDevice{ID: "B" + in.ID, Healthy: true})
		}
		for k, a := range big.Attributes {
			if a.StringVal != nil && strings.HasPrefix(*a.StringVal, "GPU-") {
				big.Attributes[k] = &api.Attribute{StringVal: ptr("B" + *a.StringVal)}
			}
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, &big)
		f := &fakeNomad{nodes: []*api.Node{n}, jobs: map[string]*api.Job{}}
		j := gated("a", 25)
		j.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{
			{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "20 GiB"}}
		f.put(j)
		s := newTestService(t, f)
		s.loop.reconcile(t.Context())
		rec, ok := pin.ParseRecord(f.jobs["a"], "g")
		must.True(t, ok)
		must.SliceLen(t, 1, rec.GPUs)
		must.StrHasPrefix(t, "BGPU-", rec.GPUs[0])
	})
}
