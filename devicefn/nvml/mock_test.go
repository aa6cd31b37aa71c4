package nvml

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// This file turns go-nvml's mock servers into described machines. The
// mocks know device facts and MIG; the test sets the function fields for
// PCI bus IDs, NUMA, NVLinks, PCIe topology, stats and events.

// topology describes a server's GPUs and how they are connected.
type topology struct {
	// busIDs are the GPUs' PCI bus IDs in NVML's legacy form "0000:07:00.0".
	busIDs []string
	// numa are the GPUs' NUMA nodes; nil means NOT_SUPPORTED.
	numa []int
	// nvlink[i][j] is the number of NVLinks straight from GPU i to GPU j.
	nvlink [][]int
	// switchLinks is the number of NVLinks from each GPU to NVSwitches.
	switchLinks int
	// cpuLinks is the number of NVLinks from each GPU to the CPU (POWER9).
	cpuLinks int
	// pcie[i][j] is the PCIe level between GPUs i and j; nil means SYS.
	pcie [][]devicefn.LinkKind
}

// testNode is a mock server described by a topology.
type testNode struct {
	*server.Server
	devs   []*server.Device
	events *eventQueue
	clock  *fakeClock
}

var (
	busA100 = []string{"0000:07:00.0", "0000:0F:00.0", "0000:47:00.0", "0000:4E:00.0", "0000:87:00.0", "0000:90:00.0", "0000:B7:00.0", "0000:BD:00.0"}
	busH100 = []string{"0000:18:00.0", "0000:2A:00.0", "0000:3A:00.0", "0000:5D:00.0", "0000:9A:00.0", "0000:AB:00.0", "0000:BA:00.0", "0000:DB:00.0"}
	busDGX1 = []string{"0000:06:00.0", "0000:07:00.0", "0000:0A:00.0", "0000:0B:00.0", "0000:85:00.0", "0000:86:00.0", "0000:89:00.0", "0000:8A:00.0"}

	// v100 is a Tesla V100 as go-nvml's mock would describe it.
	v100 = gpus.Config{
		Name:         "Tesla V100-SXM2-16GB",
		Architecture: nvml.DEVICE_ARCH_VOLTA,
		Brand:        nvml.BRAND_TESLA,
		MemoryMB:     16160,
		CudaMajor:    7,
		CudaMinor:    0,
		PciDeviceId:  0x1DB110DE,
	}
)

// newDGXA100 is go-nvml's DGX A100 mock wired as the real one: twelve
// NVLinks from each GPU to six NVSwitches, NUMA nodes as in
// testdata's dgx_a100_topo_m.txt.
func newDGXA100(t testing.TB) *testNode {
	return describe(t, dgxa100.New(), topology{
		busIDs:      busA100,
		numa:        []int{3, 3, 1, 1, 7, 7, 5, 5},
		switchLinks: 12,
		pcie:        pairsBehindSwitches(8),
	})
}

// newDGXH100 is go-nvml's DGX H100 mock with eighteen NVLinks per GPU to
// the NVSwitches.
func newDGXH100(t testing.TB) *testNode {
	return describe(t, dgxh100.New(), topology{
		busIDs:      busH100,
		numa:        []int{0, 0, 0, 0, 1, 1, 1, 1},
		switchLinks: 18,
		pcie:        pairsBehindSwitches(8),
	})
}

// newDGX1 is a DGX-1 V100: the hybrid cube-mesh of direct NVLinks read off
// the real server's topo -m, and its PCIe view for the other pairs.
func newDGX1(t testing.TB, withNVLink bool) *testNode {
	s, err := server.New(
		server.WithGPUs(gpus.Multiple(8, v100)...),
		server.WithDriverVersion("535.129.03"),
		server.WithCUDADriverVersion(12020),
	)
	must.NoError(t, err)
	topo := topology{
		busIDs: busDGX1,
		numa:   []int{0, 0, 0, 0, 1, 1, 1, 1},
		pcie:   kinds(expectedMatrix(t, "dgx1_topo_mp_pcie_only_view.txt")),
	}
	if withNVLink {
		topo.nvlink = nvlinkCounts(expectedMatrix(t, "dgx1_v100_topo_m.txt"))
	}
	n := describe(t, s, topo)
	for _, d := range n.devs {
		// Volta has no MIG.
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	}
	return n
}

// describe sets every function field the source uses on s and its devices.
func describe(t testing.TB, s *server.Server, topo topology) *testNode {
	t.Helper()
	n := &testNode{Server: s, events: &eventQueue{}, clock: newFakeClock()}
	for _, d := range s.Devices {
		n.devs = append(n.devs, d.(*server.Device))
	}
	must.Eq(t, len(n.devs), len(topo.busIDs), must.Sprint("one bus ID per GPU"))

	pci := make([]nvml.PciInfo, len(n.devs))
	for i, d := range n.devs {
		d.PciBusID = topo.busIDs[i]
		pci[i] = pciInfo(topo.busIDs[i], d.Config.PciDeviceId)
	}
	for i, d := range n.devs {
		var remotes []nvml.PciInfo
		for j := range n.devs {
			if topo.nvlink != nil {
				for range topo.nvlink[i][j] {
					remotes = append(remotes, pci[j])
				}
			}
		}
		for l := range topo.switchLinks {
			remotes = append(remotes, pciInfo(fmt.Sprintf("0000:%02X:00.0", 0xC4+l%6), 0x1AF110DE))
		}
		for range topo.cpuLinks {
			remotes = append(remotes, pciInfo("0007:00:00.0", 0x04EA1014))
		}
		n.wire(i, d, pci[i], remotes, topo)
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return n.events.set(), nvml.SUCCESS }
	return n
}

func (n *testNode) wire(i int, d *server.Device, pci nvml.PciInfo, remotes []nvml.PciInfo, topo topology) {
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if topo.numa == nil {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return topo.numa[i], nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		switch {
		case len(remotes) == 0:
			return 0, nvml.ERROR_NOT_SUPPORTED
		case l >= len(remotes):
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		if l >= len(remotes) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return remotes[l], nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := other.(*server.Device).Index
		if topo.pcie == nil {
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		return topologyLevel(topo.pcie[i][j]), nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
}

// source returns a Source on the node with its fake clock, closed at the
// end of the test.
func (n *testNode) source(t testing.TB, opts Options) *Source {
	opts.NVML = n.Server
	if opts.Now == nil {
		opts.Now = n.clock.Now
	}
	s := New(opts)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// pciInfo is PciInfo as NVML fills it for the legacy bus ID "0000:07:00.0".
func pciInfo(legacy string, deviceID uint32) nvml.PciInfo {
	var p nvml.PciInfo
	var domain, bus, dev, fn uint32
	if _, err := fmt.Sscanf(legacy, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		panic(err)
	}
	p.Domain, p.Bus, p.Device, p.PciDeviceId = domain, bus, dev, deviceID
	copy(p.BusIdLegacy[:], cChars(legacy))
	copy(p.BusId[:], cChars(fmt.Sprintf("%08X:%02X:%02X.%X", domain, bus, dev, fn)))
	return p
}

func cChars(s string) []int8 {
	out := make([]int8, len(s))
	for i := range len(s) {
		out[i] = int8(s[i])
	}
	return out
}

func topologyLevel(k devicefn.LinkKind) nvml.GpuTopologyLevel {
	switch k {
	case devicefn.LinkPIX:
		return nvml.TOPOLOGY_SINGLE
	case devicefn.LinkPXB:
		return nvml.TOPOLOGY_MULTIPLE
	case devicefn.LinkPHB:
		return nvml.TOPOLOGY_HOSTBRIDGE
	case devicefn.LinkNODE:
		return nvml.TOPOLOGY_NODE
	}
	return nvml.TOPOLOGY_SYSTEM
}

// pairsBehindSwitches is the PCIe view of DGX baseboards: GPUs 2k and
// 2k+1 share a PCIe switch, all others meet across the SMP interconnect.
func pairsBehindSwitches(n int) [][]devicefn.LinkKind {
	m := make([][]devicefn.LinkKind, n)
	for i := range n {
		m[i] = make([]devicefn.LinkKind, n)
		for j := range n {
			switch {
			case i == j:
				m[i][j] = devicefn.LinkSelf
			case i/2 == j/2:
				m[i][j] = devicefn.LinkPXB
			default:
				m[i][j] = devicefn.LinkSYS
			}
		}
	}
	return m
}

// expectedMatrix reads one server of testdata/gpu_link_matrices.json.
func expectedMatrix(t testing.TB, key string) devicefn.Matrix {
	t.Helper()
	b, err := os.ReadFile("testdata/gpu_link_matrices.json")
	must.NoError(t, err)
	var all map[string]struct {
		Matrix [][]string `json:"gpu_link_matrix"`
	}
	must.NoError(t, json.Unmarshal(b, &all))
	entry, ok := all[key]
	must.True(t, ok, must.Sprintf("no %q in testdata", key))
	m := make(devicefn.Matrix, len(entry.Matrix))
	for i, row := range entry.Matrix {
		for _, cell := range row {
			l, err := devicefn.ParseLink(cell)
			must.NoError(t, err)
			m[i] = append(m[i], l)
		}
	}
	must.NoError(t, m.Validate())
	return m
}

func kinds(m devicefn.Matrix) [][]devicefn.LinkKind {
	out := make([][]devicefn.LinkKind, len(m))
	for i, row := range m {
		for _, l := range row {
			out[i] = append(out[i], l.Kind)
		}
	}
	return out
}

func nvlinkCounts(m devicefn.Matrix) [][]int {
	out := make([][]int, len(m))
	for i, row := range m {
		out[i] = make([]int, len(row))
		for j, l := range row {
			if l.Kind == devicefn.LinkNVLink {
				out[i][j] = l.NVLinks
			}
		}
	}
	return out
}

// eventQueue backs the mock event set: tests push, the source drains.
type eventQueue struct {
	mu      sync.Mutex
	pending []nvml.EventData
	freed   int
}

func (q *eventQueue) set() nvml.EventSet {
	return &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			q.mu.Lock()
			defer q.mu.Unlock()
			if len(q.pending) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := q.pending[0]
			q.pending = q.pending[1:]
			return e, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.freed++
			return nvml.SUCCESS
		},
	}
}

func (q *eventQueue) push(events ...nvml.EventData) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, events...)
}

// xid is the event NVML delivers for an XID on dev.
func xid(dev nvml.Device, n uint64) nvml.EventData {
	return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: n}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// logBuffer captures a source's logs for tests that check them.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

func newLogger() (hclog.Logger, *logBuffer) {
	buf := &logBuffer{}
	return hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Trace}), buf
}
