package gpumap

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// node builds what Nomad's API returns for a client running the plugin on
// the named fixture.
func node(t *testing.T, name, fx string, sick string) *api.Node {
	t.Helper()
	src, err := fixtures.FS.ReadFile(fx)
	must.NoError(t, err)
	st, err := fixture.Parse(fx, src)
	must.NoError(t, err)
	n := &api.Node{ID: name + "-0000-1111", Name: name, Status: "ready", NodeResources: &api.NodeResources{}}
	for _, g := range devicefn.Groups(&st.Inventory, 100, "mps", nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: g.Model, Attributes: nomadattr.ToAPI(g.Attributes())}
		for _, gpu := range g.GPUs {
			for _, id := range devicefn.ShareIDs(gpu.UUID, 100) {
				inst := &api.NodeDevice{ID: id, Healthy: gpu.UUID != sick}
				if !inst.Healthy {
					inst.HealthDescription = "XID 79"
				}
				d.Instances = append(d.Instances, inst)
			}
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	for _, g := range devicefn.MIGGroups(&st.Inventory, nil) {
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare-mig", Name: g.Profile, Attributes: nomadattr.ToAPI(g.Attributes())}
		for _, inst := range g.Instances {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: inst.UUID, Healthy: inst.Parent.UUID != sick})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, d)
	}
	return n
}

func alloc(id, job, status string, uuid string, from, to int) *api.Allocation {
	var ids []string
	for k := from; k < to; k++ {
		ids = append(ids, fmt.Sprintf("%s:%d", uuid, k))
	}
	return &api.Allocation{ID: id, JobID: job, TaskGroup: "g", ClientStatus: status, DesiredStatus: "run",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", Name: "x", DeviceIDs: ids}}},
		}}}
}

func TestBuildAndRender(t *testing.T) {
	const gpu3 = "GPU-d1000000-0000-4000-8000-000000000003"
	nodes := []*api.Node{node(t, "pcie", fixtures.PCIe4GPU, ""), node(t, "dgx1", fixtures.DGX1V100, "GPU-d1000000-0000-4000-8000-000000000007")}
	allocs := []*api.Allocation{
		alloc("aaaaaaaa-1", "train", "running", gpu3, 0, 25),
		alloc("bbbbbbbb-2", "infer", "running", gpu3, 25, 75),
		alloc("cccccccc-3", "old", "complete", gpu3, 75, 100),
	}
	m := Build(nodes, allocs)
	must.SliceLen(t, 2, m.Nodes)
	must.Eq(t, "dgx1", m.Nodes[0].Name)
	g := m.Nodes[0].GPUs[3]
	must.Eq(t, 75, g.Used)
	must.SliceLen(t, 2, g.Users)
	must.Eq(t, "NV2,NV1,NV2,X,SYS,SYS,SYS,NV1", g.Links)
	must.False(t, m.Nodes[0].GPUs[7].Healthy)

	var b strings.Builder
	must.NoError(t, Render(&b, m))
	out := b.String()
	must.StrContains(t, out, "dgx1  dgx1-000  8 x Tesla V100-SXM2-16GB  sharing=mps  75/800 shares used (9%)")
	must.StrContains(t, out, "  GPU3  numa 0  [###############.....]   75/100  train/g[aaaaaaaa]:25 infer/g[bbbbbbbb]:50")
	must.StrContains(t, out, "UNHEALTHY: XID 79")
	must.StrContains(t, out, "cluster: 75/1200 shares used (6.2%)")
}

func TestRenderEmpty(t *testing.T) {
	var b strings.Builder
	must.NoError(t, Render(&b, &Map{}))
	must.StrContains(t, b.String(), "no nodes with gpushare devices")
}

func TestHideShowsOtherNamespacesAsAnonymousShares(t *testing.T) {
	const gpu3 = "GPU-d1000000-0000-4000-8000-000000000003"
	mine := alloc("aaaaaaaa-1", "train", "running", gpu3, 0, 25)
	theirs := alloc("bbbbbbbb-2", "secret-job", "running", gpu3, 25, 75)
	theirs.Namespace = "team-b"
	theirs2 := alloc("cccccccc-3", "secret-two", "running", gpu3, 75, 85)
	theirs2.Namespace = "team-b"
	m := Build([]*api.Node{node(t, "dgx1", fixtures.DGX1V100, "")}, []*api.Allocation{mine, theirs, theirs2})
	m.Hide(func(ns string) bool { return ns == "default" })
	g := m.Nodes[0].GPUs[3]
	must.Eq(t, 85, g.Used) // their shares are used all the same
	must.Eq(t, []Usage{
		{AllocID: "aaaaaaaa-1", Namespace: "default", Job: "train", Group: "g", Shares: 25},
		{Shares: 60, Other: true},
	}, g.Users)

	var b strings.Builder
	must.NoError(t, Render(&b, m))
	must.StrContains(t, b.String(), "train/g[aaaaaaaa]:25 (another namespace):60")
	must.StrNotContains(t, b.String(), "secret")
}

func migAlloc(id, job string, mig ...string) *api.Allocation {
	return &api.Allocation{ID: id, JobID: job, TaskGroup: "g", ClientStatus: "running", DesiredStatus: "run",
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare-mig", Name: "x", DeviceIDs: mig}}},
		}}}
}

func TestBuildMIG(t *testing.T) {
	const (
		gpu0 = "GPU-a2000000-0000-4000-8000-000000000000"
		mig3 = "MIG-a2000000-0000-4000-8000-000000000001"
		mig1 = "MIG-a2000000-0000-4000-8000-000000000004"
	)
	nodes := []*api.Node{node(t, "a100", fixtures.A100MIG, ""), node(t, "dgx1", fixtures.DGX1V100, "")}
	allocs := []*api.Allocation{migAlloc("aaaaaaaa-1", "big", mig3), migAlloc("bbbbbbbb-2", "small", mig1)}
	m := Build(nodes, allocs)
	must.SliceLen(t, 2, m.Nodes)
	must.SliceEmpty(t, m.Problems)
	a := m.Nodes[0]
	must.Eq(t, "a100", a.Name)
	must.Eq(t, "mig", a.Sharing)
	must.SliceLen(t, 2, a.GPUs)
	g := a.GPUs[0]
	must.Eq(t, gpu0, g.UUID)
	must.Eq(t, 7, g.Shares) // slices
	must.Eq(t, 4, g.Used)   // 3g + 1g held
	must.SliceLen(t, 4, g.MIG)
	must.Eq(t, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"},
		[]string{g.MIG[0].Profile, g.MIG[1].Profile, g.MIG[2].Profile, g.MIG[3].Profile})
	must.Eq(t, "big", g.MIG[0].Users[0].Job)
	must.SliceEmpty(t, g.MIG[1].Users)
	must.Eq(t, "small", g.MIG[3].Users[0].Job)

	m.Hide(func(ns string) bool { return false })
	must.True(t, m.Nodes[0].GPUs[0].MIG[0].Users[0].Other)

	var b strings.Builder
	must.NoError(t, Render(&b, m))
	out := b.String()
	must.StrContains(t, out, "a100  a100-000  2 x NVIDIA A100-SXM4-40GB  sharing=mig  4/14 MIG slices used (29%)")
	must.StrContains(t, out, "    MIG 3g.20gb    "+mig3+"  (another namespace):3")
	must.StrContains(t, out, "    MIG 2g.10gb    MIG-a2000000-0000-4000-8000-000000000002  free")
	must.StrContains(t, out, "cluster: 0/800 shares used (0.0%)")
	must.StrContains(t, out, "cluster: 4/14 MIG slices used (28.6%)")
}

// A node whose plugin shares with MPS but reports its MPS daemon missing
// (mps_daemon not "running") carries that state: its tasks are
// time-sliced, and the map says so rather than "sharing mps".
func TestMPSDaemonMissingIsCarried(t *testing.T) {
	sick := node(t, "pcie", fixtures.PCIe4GPU, "")
	for _, d := range sick.NodeResources.Devices {
		if d.Type == "gpushare" {
			v := "not answering at /tmp/nvidia-mps"
			d.Attributes[attrMPSDaemon] = &api.Attribute{StringVal: &v}
		}
	}
	well := node(t, "dgx1", fixtures.DGX1V100, "")
	for _, d := range well.NodeResources.Devices {
		if d.Type == "gpushare" {
			v := "running"
			d.Attributes[attrMPSDaemon] = &api.Attribute{StringVal: &v}
		}
	}
	m := Build([]*api.Node{sick, well, node(t, "old", fixtures.PCIe4GPU, "")}, nil)
	must.SliceLen(t, 3, m.Nodes)
	must.Eq(t, "dgx1", m.Nodes[0].Name)
	must.False(t, m.Nodes[0].MPSMissing())
	must.Eq(t, "running", m.Nodes[0].MPSDaemon)
	must.Eq(t, "old", m.Nodes[1].Name) // a plugin that does not say: not flagged
	must.False(t, m.Nodes[1].MPSMissing())
	must.Eq(t, "pcie", m.Nodes[2].Name)
	must.True(t, m.Nodes[2].MPSMissing())
	must.Eq(t, "not answering at /tmp/nvidia-mps", m.Nodes[2].MPSDaemon)
	var b strings.Builder
	must.NoError(t, Render(&b, m))
	must.StrContains(t, b.String(), "sharing=mps  (MPS daemon not answering at /tmp/nvidia-mps: tasks time-sliced)")
}
