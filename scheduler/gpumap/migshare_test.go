package gpumap

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// sharedMIGNode is what Nomad's API returns for a client of the A100 MIG
// fixture whose plugin offers its instances shared further.
func sharedMIGNode(t *testing.T, name, sick string) *api.Node {
	t.Helper()
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	n := &api.Node{ID: name + "-0000-1111", Name: name, Status: "ready", NodeResources: &api.NodeResources{}}
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
		for _, gpu := range g.GPUs {
			for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
				inst := &api.NodeDevice{ID: id, Healthy: gpu.UUID != sick}
				if !inst.Healthy {
					inst.HealthDescription = "XID 79"
				}
				d.Instances = append(d.Instances, inst)
			}
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	return n
}

// Shared MIG instances show under their parent GPU with the shares each
// offers and its users; the node counts shares, not slices.
func TestBuildSharedMIG(t *testing.T) {
	const (
		gpu0 = "GPU-a2000000-0000-4000-8000-000000000000"
		gpu1 = "GPU-a2000000-0000-4000-8000-000000000001"
		mig3 = "MIG-a2000000-0000-4000-8000-000000000001"
		mig1 = "MIG-a2000000-0000-4000-8000-000000000004"
		mig7 = "MIG-a2000000-0000-4000-8000-000000000011"
	)
	nodes := []*api.Node{sharedMIGNode(t, "a100", mig1), node(t, "dgx1", fixtures.DGX1V100, "")}
	allocs := []*api.Allocation{
		alloc("aaaaaaaa-1", "train", "running", mig3, 0, 30),
		alloc("bbbbbbbb-2", "infer", "running", mig3, 30, 42),
		alloc("cccccccc-3", "tiny", "running", mig7, 0, 10),
	}
	m := Build(nodes, allocs)
	must.SliceEmpty(t, m.Problems)
	must.SliceLen(t, 2, m.Nodes)
	a := m.Nodes[0]
	must.Eq(t, "a100", a.Name)
	must.Eq(t, "NVIDIA A100-SXM4-40GB", a.Model) // the parents' model
	must.Eq(t, "mps", a.Sharing)
	must.Eq(t, devicefn.MIGShared, a.MIG)
	must.SliceLen(t, 2, a.GPUs)
	g := a.GPUs[0]
	must.Eq(t, gpu0, g.UUID)
	must.Eq(t, 42+28+14+14, g.Shares) // what its instances offer
	must.Eq(t, 42, g.Used)
	must.False(t, g.Healthy) // one instance is not
	must.SliceLen(t, 2, g.Users)
	must.Eq(t, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, []string{g.MIG[0].Profile, g.MIG[1].Profile, g.MIG[2].Profile, g.MIG[3].Profile})
	i3 := g.MIG[0]
	must.Eq(t, mig3, i3.UUID)
	must.Eq(t, 42, i3.Shares)
	must.Eq(t, 42, i3.Used)
	must.Eq(t, []string{"train", "infer"}, []string{i3.Users[0].Job, i3.Users[1].Job})
	must.Eq(t, 28, g.MIG[1].Shares)
	must.Eq(t, 0, g.MIG[1].Used)
	must.False(t, g.MIG[3].Healthy)
	must.Eq(t, gpu1, a.GPUs[1].UUID)
	must.Eq(t, 10, a.GPUs[1].MIG[0].Used)
	must.Eq(t, 100, a.GPUs[1].MIG[0].Shares)

	var b strings.Builder
	must.NoError(t, Render(&b, m))
	out := b.String()
	must.StrContains(t, out, "a100  a100-000  2 x NVIDIA A100-SXM4-40GB  sharing=mps  mig=shared  52/198 shares used (26%)")
	must.StrContains(t, out, "    MIG 3g.20gb    "+mig3+"  [####################]   42/42   train/g[aaaaaaaa]:30 infer/g[bbbbbbbb]:12")
	must.StrContains(t, out, "    MIG 1g.5gb     "+mig1+"  [....................]    0/14   free  UNHEALTHY")
	must.StrContains(t, out, "    MIG 7g.40gb    "+mig7+"  [##..................]   10/100  tiny/g[cccccccc]:10")
	must.StrContains(t, out, "cluster: 52/998 shares used (5.2%)")
	must.StrNotContains(t, out, "MIG slices")

	m.Hide(func(string) bool { return false })
	must.True(t, m.Nodes[0].GPUs[0].MIG[0].Users[0].Other)
}
