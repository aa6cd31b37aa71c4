package nvml

import (
	"context"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

func TestInventory_facts(t *testing.T) {
	cases := []struct {
		name      string
		node      func(testing.TB) *testNode
		driver    string
		cuda      string
		model     string
		memoryMiB uint64
		cc        string
		busIDs    []string
		numa      []int
	}{
		{
			name:   "dgx a100",
			node:   newDGXA100,
			driver: "550.54.15", cuda: "12.4",
			model: "Mock NVIDIA A100-SXM4-40GB", memoryMiB: 40960, cc: "8.0",
			busIDs: []string{"00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
				"00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"},
			numa: []int{3, 3, 1, 1, 7, 7, 5, 5},
		},
		{
			name:   "dgx h100",
			node:   newDGXH100,
			driver: "550.54.15", cuda: "12.4",
			model: "NVIDIA H100 80GB HBM3", memoryMiB: 81920, cc: "9.0",
			busIDs: []string{"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
				"00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"},
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
		},
		{
			name:   "dgx-1 v100",
			node:   func(t testing.TB) *testNode { return newDGX1(t, true) },
			driver: "535.129.03", cuda: "12.2",
			model: "Tesla V100-SXM2-16GB", memoryMiB: 16160, cc: "7.0",
			busIDs: []string{"00000000:06:00.0", "00000000:07:00.0", "00000000:0A:00.0", "00000000:0B:00.0",
				"00000000:85:00.0", "00000000:86:00.0", "00000000:89:00.0", "00000000:8A:00.0"},
			numa: []int{0, 0, 0, 0, 1, 1, 1, 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node(t)
			inv, err := n.source(t, Options{}).Inventory(context.Background())
			must.NoError(t, err)
			must.NoError(t, inv.Validate())
			must.Eq(t, tc.driver, inv.DriverVersion)
			must.Eq(t, tc.cuda, inv.CUDAVersion)
			must.SliceLen(t, 8, inv.GPUs)
			for i, g := range inv.GPUs {
				want := devicefn.GPU{
					Index:             i,
					UUID:              n.devs[i].UUID,
					Model:             tc.model,
					MemoryMiB:         tc.memoryMiB,
					PCIBusID:          tc.busIDs[i],
					NUMANode:          tc.numa[i],
					ComputeCapability: tc.cc,
					Minor:             i,
				}
				must.Eq(t, want, g)
			}
			groups := devicefn.Groups(inv, devicefn.DefaultSharesPerGPU, devicefn.SharingMPS, nil)
			must.SliceLen(t, 1, groups)
			must.SliceLen(t, 8, groups[0].GPUs)
		})
	}
}

func TestInventory_notSupportedFacts(t *testing.T) {
	n := describe(t, dgxa100.New(), topology{busIDs: busA100})
	for _, d := range n.devs {
		d.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	}
	n.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }

	inv, err := n.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, "", inv.CUDAVersion)
	for _, g := range inv.GPUs {
		must.Eq(t, -1, g.NUMANode)
		must.Eq(t, -1, g.Minor)
		must.False(t, g.MIG)
	}
}

func TestInventory_MIG(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[3])
	logger, logs := newLogger()
	src := n.source(t, Options{Logger: logger})

	for range 2 {
		inv, err := src.Inventory(context.Background())
		must.NoError(t, err)
		for i, g := range inv.GPUs {
			must.Eq(t, i == 3, g.MIG, must.Sprintf("gpu %d", i))
		}
		groups := devicefn.Groups(inv, devicefn.DefaultSharesPerGPU, devicefn.SharingMPS, nil)
		must.SliceLen(t, 1, groups)
		must.SliceLen(t, 7, groups[0].GPUs)
		for _, g := range groups[0].GPUs {
			must.NotEq(t, n.devs[3].UUID, g.UUID)
		}
	}
	must.Eq(t, 1, logs.count("[INFO]  nvml: MIG-enabled GPU"), must.Sprint("logged once"))
}

// A GPU that falls off the bus after a good inventory keeps its place: the
// source reports the last known inventory and Health says what is wrong.
func TestInventory_lastKnownOnFailure(t *testing.T) {
	n := newDGXH100(t)
	logger, logs := newLogger()
	src := n.source(t, Options{Logger: logger})
	ctx := context.Background()

	good, err := src.Inventory(ctx)
	must.NoError(t, err)
	good.GPUs[0].Model = "changed by the caller"

	n.devs[5].GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	for range 3 {
		inv, err := src.Inventory(ctx)
		must.NoError(t, err)
		must.Eq(t, "NVIDIA H100 80GB HBM3", inv.GPUs[0].Model, must.Sprint("callers get copies"))
		must.Eq(t, n.devs[5].UUID, inv.GPUs[5].UUID)
	}
	must.Eq(t, 1, logs.count("[WARN]  nvml: cannot read the GPU inventory; reporting the last known one"))

	// Without an earlier inventory the failure is an error naming the GPU.
	fresh := newDGXH100(t)
	fresh.devs[5].GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	_, err = fresh.source(t, Options{}).Inventory(ctx)
	must.ErrorIs(t, err, nvml.ERROR_GPU_IS_LOST)
	must.StrContains(t, err.Error(), "gpu 5 ("+fresh.devs[5].UUID+")")
	must.False(t, errors.Is(err, devicefn.ErrUnavailable))
}

func TestInventory_cancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newDGXA100(t).source(t, Options{}).Inventory(ctx)
	must.ErrorIs(t, err, context.Canceled)
}

// A GPU that NVML cannot open at init is left out; the others are listed.
func TestInventory_skipsUnopenableGPU(t *testing.T) {
	n := newDGXA100(t)
	n.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 2 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return n.Devices[i], nvml.SUCCESS
	}
	inv, err := n.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 7, inv.GPUs)
	must.Eq(t, 3, inv.GPUs[2].Index)
	must.NoError(t, inv.Validate())
}

func TestCUDAVersion(t *testing.T) {
	cases := map[int]string{12040: "12.4", 11080: "11.8", 12020: "12.2", 10010: "10.1", 13000: "13.0"}
	for v, want := range cases {
		t.Run(want, func(t *testing.T) {
			must.Eq(t, want, cudaVersion(v))
		})
	}
}

func TestPCIBusID(t *testing.T) {
	cases := []struct {
		name string
		info nvml.PciInfo
		want string
	}{
		{name: "bus id", info: pciInfo("0000:3b:00.0", 0), want: "00000000:3B:00.0"},
		{name: "legacy only", info: nvml.PciInfo{BusIdLegacy: legacy("0000:06:00.0")}, want: "00000000:06:00.0"},
		{name: "legacy nonzero domain", info: nvml.PciInfo{BusIdLegacy: legacy("0002:81:00.0")}, want: "00000002:81:00.0"},
		{name: "fields only", info: nvml.PciInfo{Domain: 0, Bus: 0xb7, Device: 0}, want: "00000000:B7:00.0"},
		{name: "empty", info: nvml.PciInfo{}, want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, pciBusID(tc.info))
		})
	}
	// Bytes after the terminating NUL are ignored.
	var p nvml.PciInfo
	copy(p.BusId[:], cChars("00000000:07:00.0\x00garbage"))
	must.Eq(t, "00000000:07:00.0", pciBusID(p))
}

func legacy(s string) (out [16]int8) {
	copy(out[:], cChars(s))
	return out
}
