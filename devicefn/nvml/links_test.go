package nvml

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// The source reproduces `nvidia-smi topo -m` of real servers exactly.
func TestLinks_realServers(t *testing.T) {
	cases := []struct {
		name string
		node func(testing.TB) *testNode
		want string // key in testdata/gpu_link_matrices.json
		row0 string
	}{
		{
			name: "dgx-1 v100 hybrid cube-mesh",
			node: func(t testing.TB) *testNode { return newDGX1(t, true) },
			want: "dgx1_v100_topo_m.txt",
			row0: "X,NV1,NV1,NV2,NV2,SYS,SYS,SYS",
		},
		{
			name: "dgx-1 v100 without nvlink",
			node: func(t testing.TB) *testNode { return newDGX1(t, false) },
			want: "dgx1_topo_mp_pcie_only_view.txt",
			row0: "X,PIX,PHB,PHB,SYS,SYS,SYS,SYS",
		},
		{
			name: "dgx a100 nvswitch",
			node: newDGXA100,
			want: "dgx_a100_topo_m.txt",
			row0: "X,NV12,NV12,NV12,NV12,NV12,NV12,NV12",
		},
		{
			name: "dgx h100 nvswitch",
			node: newDGXH100,
			want: "hgx_h100_topo_m_gpu_rows.txt",
			row0: "X,NV18,NV18,NV18,NV18,NV18,NV18,NV18",
		},
		{
			name: "pcie two sockets",
			node: func(t testing.TB) *testNode {
				return newServer(t, 4, topology{
					busIDs: busA100[:4],
					pcie:   kinds(expectedMatrix(t, "pcie_4gpu_2socket_legacy_soc.txt")),
				})
			},
			want: "pcie_4gpu_2socket_legacy_soc.txt",
			row0: "X,PHB,SYS,SYS",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := tc.node(t).source(t, Options{}).Inventory(context.Background())
			must.NoError(t, err)
			must.Eq(t, expectedMatrix(t, tc.want), inv.Links)
			must.Eq(t, tc.row0, devicefn.EncodeRow(inv.Links[0]))
		})
	}
}

// Hand-built servers for the corner cases of link counting.
func TestLinks_corners(t *testing.T) {
	nv := func(n int) devicefn.Link { return devicefn.Link{Kind: devicefn.LinkNVLink, NVLinks: n} }
	self := devicefn.Link{Kind: devicefn.LinkSelf}
	pxb := devicefn.Link{Kind: devicefn.LinkPXB}

	cases := []struct {
		name  string
		node  func(testing.TB) *testNode
		want  devicefn.Matrix
		debug string // a debug log line the case must produce
	}{
		{
			name: "power9 links to the cpu are not nvswitch links",
			node: func(t testing.TB) *testNode {
				return newServer(t, 2, topology{busIDs: busA100[:2], nvlink: [][]int{{0, 3}, {3, 0}}, cpuLinks: 3})
			},
			want:  devicefn.Matrix{{self, nv(3)}, {nv(3), self}},
			debug: "ignoring NVLink to a device of another vendor",
		},
		{
			name: "directions disagree: the better link wins",
			node: func(t testing.TB) *testNode {
				n := newServer(t, 2, topology{busIDs: busA100[:2], nvlink: [][]int{{0, 2}, {2, 0}}})
				n.devs[1].GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
					switch l {
					case 0:
						return nvml.FEATURE_ENABLED, nvml.SUCCESS
					case 1:
						return 0, nvml.ERROR_UNKNOWN
					}
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				return n
			},
			want:  devicefn.Matrix{{self, nv(2)}, {nv(2), self}},
			debug: "the GPUs of a pair see their link differently; taking the better one",
		},
		{
			name: "switch pair is bounded by the gpu with fewer links",
			node: func(t testing.TB) *testNode {
				n := newServer(t, 3, topology{busIDs: busA100[:3], switchLinks: 12})
				n.devs[1].GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
					switch {
					case l < 10:
						return nvml.FEATURE_ENABLED, nvml.SUCCESS
					case l < 12:
						return nvml.FEATURE_DISABLED, nvml.SUCCESS
					}
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				return n
			},
			want: devicefn.Matrix{{self, nv(10), nv(12)}, {nv(10), self, nv(10)}, {nv(12), nv(10), self}},
		},
		{
			name: "gpu without nvlink falls back to pcie",
			node: func(t testing.TB) *testNode {
				n := newServer(t, 2, topology{busIDs: busA100[:2], switchLinks: 12, pcie: pairsBehindSwitches(2)})
				n.devs[1].GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
				return n
			},
			want: devicefn.Matrix{{self, pxb}, {pxb, self}},
		},
		{
			name: "active link with an unreadable remote counts as a switch link",
			node: func(t testing.TB) *testNode {
				n := newServer(t, 2, topology{busIDs: busA100[:2], switchLinks: 4})
				for _, d := range n.devs {
					d.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED }
				}
				return n
			},
			want:  devicefn.Matrix{{self, nv(4)}, {nv(4), self}},
			debug: "cannot read the remote end of an active NVLink; counting it as an NVSwitch link",
		},
		{
			name: "topology not supported is SYS",
			node: func(t testing.TB) *testNode {
				n := newServer(t, 2, topology{busIDs: busA100[:2]})
				for _, d := range n.devs {
					d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
						return 0, nvml.ERROR_NOT_SUPPORTED
					}
				}
				return n
			},
			want: devicefn.Matrix{{self, {Kind: devicefn.LinkSYS}}, {{Kind: devicefn.LinkSYS}, self}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logger, logs := newLogger()
			inv, err := tc.node(t).source(t, Options{Logger: logger}).Inventory(context.Background())
			must.NoError(t, err)
			must.Eq(t, tc.want, inv.Links)
			if tc.debug != "" {
				must.Positive(t, logs.count("[DEBUG] nvml: "+tc.debug))
			}
		})
	}
}

func TestLinks_lostGPU(t *testing.T) {
	n := newDGXA100(t)
	n.devs[6].GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	_, err := n.source(t, Options{}).Inventory(context.Background())
	must.ErrorIs(t, err, nvml.ERROR_GPU_IS_LOST)
	must.StrContains(t, err.Error(), "NVLink 0")
}

func TestLinkKind(t *testing.T) {
	cases := map[nvml.GpuTopologyLevel]devicefn.LinkKind{
		nvml.TOPOLOGY_INTERNAL:    devicefn.LinkPIX,
		nvml.TOPOLOGY_SINGLE:      devicefn.LinkPIX,
		nvml.TOPOLOGY_MULTIPLE:    devicefn.LinkPXB,
		nvml.TOPOLOGY_HOSTBRIDGE:  devicefn.LinkPHB,
		nvml.TOPOLOGY_NODE:        devicefn.LinkNODE,
		nvml.TOPOLOGY_SYSTEM:      devicefn.LinkSYS,
		nvml.GpuTopologyLevel(99): devicefn.LinkSYS,
	}
	for level, want := range cases {
		t.Run(want.String(), func(t *testing.T) {
			must.Eq(t, want, linkKind(level))
		})
	}
}

// newServer is a mock server of n A100 SXM GPUs with the given topology.
func newServer(t testing.TB, n int, topo topology) *testNode {
	s, err := server.New(
		server.WithGPUs(gpus.Multiple(n, gpus.A100_SXM4_40GB)...),
		server.WithDriverVersion("550.54.15"),
		server.WithCUDADriverVersion(12040),
	)
	must.NoError(t, err)
	return describe(t, s, topo)
}
