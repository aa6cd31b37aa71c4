package nvml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// ciProfileFor is the compute instance profile that fills a GPU instance
// of the given slices.
var ciProfileFor = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

// enableMIG turns MIG on for d and creates, through the mock's own MIG
// model, one GPU instance per profile with a compute instance that fills
// it. go-nvml's mock has no MIG device handles, so enableMIG adds them:
// GetMaxMigDeviceCount and GetMigDeviceHandleByIndex on d return, as
// NVML does, a handle per compute instance the mock holds at the time of
// the call (so a layout applied later shows), knowing its UUID
// ("MIG-<gpu>-<gi>-<ci>"), instance IDs and attributes. It returns the MIG
// device UUIDs in creation order.
func enableMIG(t testing.TB, d *server.Device, giProfiles ...int) []string {
	t.Helper()
	ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	must.Eq(t, nvml.SUCCESS, ret)
	var uuids []string
	for _, id := range giProfiles {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		must.Eq(t, nvml.SUCCESS, ret, must.Sprintf("GPU instance profile %d", id))
		gi, ret := d.CreateGpuInstance(&info)
		must.Eq(t, nvml.SUCCESS, ret)
		giInfo, _ := gi.GetInfo()
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfileFor[info.SliceCount], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		must.Eq(t, nvml.SUCCESS, ret)
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		must.Eq(t, nvml.SUCCESS, ret)
		ciID, _ := ci.GetInfo()
		uuids = append(uuids, migUUID(d, int(giInfo.Id), int(ciID.Id)))
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= 7 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		handles := migHandles(d)
		if i >= len(handles) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return handles[i], nvml.SUCCESS
	}
	return uuids
}

func migUUID(d *server.Device, gi, ci int) string {
	return fmt.Sprintf("MIG-%s-%d-%d", d.UUID[4:12], gi, ci)
}

// migHandles are the MIG device handles of d's compute instances, by GPU
// instance ID.
func migHandles(d *server.Device) []nvml.Device {
	d.RLock()
	gis := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		gis = append(gis, gi)
	}
	d.RUnlock()
	sort.Slice(gis, func(i, j int) bool { return gis[i].Info.Id < gis[j].Info.Id })
	var out []nvml.Device
	for _, gi := range gis {
		giProfile := d.Config.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)]
		gi.RLock()
		for ci := range gi.ComputeInstances {
			ciProfile := d.Config.MIGProfiles.ComputeInstanceProfiles[int(gi.Info.ProfileId)][int(ci.Info.ProfileId)]
			uuid, giID, ciID := migUUID(d, int(gi.Info.Id), int(ci.Info.Id)), int(gi.Info.Id), int(ci.Info.Id)
			attrs := nvml.DeviceAttributes{
				GpuInstanceSliceCount: giProfile.SliceCount, ComputeInstanceSliceCount: ciProfile.SliceCount,
				MemorySizeMB: giProfile.MemorySizeMB, MultiprocessorCount: ciProfile.MultiprocessorCount,
			}
			out = append(out, &mock.Device{
				GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return giID, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return ciID, nvml.SUCCESS },
				GetAttributesFunc:        func() (nvml.DeviceAttributes, nvml.Return) { return attrs, nvml.SUCCESS },
				// used: 100 MiB per GPU instance ID + 1, to tell them apart
				GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
					return nvml.Memory{Total: attrs.MemorySizeMB * mib, Used: uint64(giID+1) * 100 * mib}, nvml.SUCCESS
				},
			})
		}
		gi.RUnlock()
	}
	return out
}

func TestInventoryMIGDevicesA100(t *testing.T) {
	n := newDGXA100(t)
	uuids := enableMIG(t, n.devs[2], nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1)
	src := n.source(t, Options{})
	inv, err := src.Inventory(context.Background())
	must.NoError(t, err)

	g := inv.GPUs[2]
	must.True(t, g.MIG)
	must.Eq(t, []devicefn.MIGDevice{
		{UUID: uuids[0], Profile: "3g.20gb", MemoryMiB: 19968, Slices: 3, ParentSlices: 7, GPUInstanceID: 0},
		{UUID: uuids[1], Profile: "2g.10gb", MemoryMiB: 9856, Slices: 2, ParentSlices: 7, GPUInstanceID: 1},
		{UUID: uuids[2], Profile: "1g.5gb", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, GPUInstanceID: 2},
		{UUID: uuids[3], Profile: "1g.5gb+me", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, GPUInstanceID: 3},
	}, g.MIGDevices)
	for i, other := range inv.GPUs {
		if i != 2 {
			must.False(t, other.MIG)
			must.SliceEmpty(t, other.MIGDevices)
		}
	}

	// MIG and whole GPUs on one node: the seven others are shared, the
	// instances carry their parent's place in the node
	groups := devicefn.Groups(inv, devicefn.DefaultSharesPerGPU, devicefn.SharingMPS, nil)
	must.SliceLen(t, 1, groups)
	must.SliceLen(t, 7, groups[0].GPUs)
	migs := devicefn.MIGGroups(inv, nil)
	must.SliceLen(t, 4, migs)
	must.Eq(t, "1g.5gb", migs[0].Profile)
	inst := migs[0].Instances[0]
	must.Eq(t, n.devs[2].UUID, inst.Parent.UUID)
	must.Eq(t, 2, inst.Parent.Index)
	must.Eq(t, 1, inst.Parent.NUMANode)
	must.Eq(t, "00000000:47:00.0", inst.Parent.PCIBusID)
	must.Eq(t, devicefn.LinkSelf, inst.ParentLinks[2].Kind)
	must.Eq(t, devicefn.LinkNVLink, inst.ParentLinks[0].Kind)
}

func TestInventoryMIGDevicesH100(t *testing.T) {
	n := newDGXH100(t)
	enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	enableMIG(t, n.devs[5], nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	inv, err := n.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, "7g.80gb", inv.GPUs[0].MIGDevices[0].Profile)
	must.Eq(t, 1.0, inv.GPUs[0].MIGDevices[0].Fraction())
	must.Eq(t, "3g.40gb", inv.GPUs[5].MIGDevices[0].Profile)
	must.Eq(t, "1g.10gb", inv.GPUs[5].MIGDevices[1].Profile)
}

func TestInventoryMIGWithoutInstances(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[3])
	logger, logs := newLogger()
	src := n.source(t, Options{Logger: logger})
	for range 2 {
		inv, err := src.Inventory(context.Background())
		must.NoError(t, err)
		must.True(t, inv.GPUs[3].MIG)
		must.SliceEmpty(t, inv.GPUs[3].MIGDevices)
		must.SliceEmpty(t, devicefn.MIGGroups(inv, nil))
	}
	must.Eq(t, 1, logs.count("[INFO]  nvml: MIG-enabled GPU: offering its MIG devices"), must.Sprint("logged once"))
}

func TestInventoryMIGCapMinors(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[1], nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	root := t.TempDir()
	gi := filepath.Join(root, "driver/nvidia/capabilities/gpu1/mig/gi0")
	must.NoError(t, os.MkdirAll(filepath.Join(gi, "ci0"), 0o755))
	must.NoError(t, os.WriteFile(filepath.Join(gi, "access"), []byte("DeviceFileMinor: 30\nDeviceFileMode: 292\nDeviceFileModify: 1\n"), 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(gi, "ci0", "access"), []byte("DeviceFileMinor: 31\nDeviceFileMode: 292\n"), 0o644))
	inv, err := n.source(t, Options{ProcRoot: root}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, []int{30, 31}, inv.GPUs[1].MIGDevices[0].CapMinors)
}

func TestInventoryMIGErrors(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	// a handle in a GPU instance NVML does not list
	n.devs[0].GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i > 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-x", nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 5, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetAttributesFunc:        func() (nvml.DeviceAttributes, nvml.Return) { return nvml.DeviceAttributes{}, nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	_, err := n.source(t, Options{}).Inventory(context.Background())
	must.ErrorContains(t, err, "MIG device MIG-x is in GPU instance 5, which NVML does not list, and has no slice count")
}

// Without the right to list GPU instances, the MIG devices' own attributes
// name their profiles.
func TestInventoryMIGWithoutListPermission(t *testing.T) {
	n := newDGXA100(t)
	uuids := enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	n.devs[0].GetGpuInstancesFunc = func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	inv, err := n.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, []devicefn.MIGDevice{
		{UUID: uuids[0], Profile: "3g.20gb", MemoryMiB: 19968, Slices: 3, ParentSlices: 7, GPUInstanceID: 0},
		{UUID: uuids[1], Profile: "1g.5gb", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, GPUInstanceID: 1},
	}, inv.GPUs[0].MIGDevices)
}

func TestMIGMemoryGB(t *testing.T) {
	for _, c := range []struct{ total, profile, want uint64 }{
		{40960, 4864, 5}, {40960, 9856, 10}, {40960, 19968, 20}, {40960, 40192, 40},
		{81920, 9856, 10}, {81920, 40448, 40}, {81920, 80896, 80},
	} {
		must.Eq(t, c.want, migMemoryGB(c.total, c.profile), must.Sprintf("%d of %d", c.profile, c.total))
	}
}

// A MIG-enabled GPU's profiles are NVML's GPU instance profiles, named as
// the layouts name them, by slices; a GPU without MIG has none.
func TestInventoryMIGProfiles(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[2], nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	inv, err := n.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, []devicefn.MIGProfile{
		{Name: "1g.5gb", Slices: 1, MemoryMiB: 4864},
		{Name: "1g.5gb+me", Slices: 1, MemoryMiB: 4864},
		{Name: "1g.10gb", Slices: 1, MemoryMiB: 9856},
		{Name: "2g.10gb", Slices: 2, MemoryMiB: 9856},
		{Name: "3g.20gb", Slices: 3, MemoryMiB: 19968},
		{Name: "4g.20gb", Slices: 4, MemoryMiB: 19968},
		{Name: "7g.40gb", Slices: 7, MemoryMiB: 40192},
	}, inv.GPUs[2].MIGProfiles)
	must.SliceEmpty(t, inv.GPUs[0].MIGProfiles)

	h := newDGXH100(t)
	enableMIG(t, h.devs[0])
	inv, err = h.source(t, Options{}).Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, []devicefn.MIGProfile{
		{Name: "1g.10gb", Slices: 1, MemoryMiB: 10240}, {Name: "1g.10gb+me", Slices: 1, MemoryMiB: 10240},
		{Name: "1g.20gb", Slices: 1, MemoryMiB: 20480}, {Name: "2g.20gb", Slices: 2, MemoryMiB: 20480},
		{Name: "3g.40gb", Slices: 3, MemoryMiB: 40960}, {Name: "4g.40gb", Slices: 4, MemoryMiB: 40960},
		{Name: "7g.80gb", Slices: 7, MemoryMiB: 81920},
	}, inv.GPUs[0].MIGProfiles)

	// a layout names profiles as the inventory does
	src := n.source(t, Options{})
	must.NoError(t, src.ApplyMIGLayout(context.Background(), n.devs[2].UUID, []string{"4g.20gb", "1g.10gb"}))
	inv, err = src.Inventory(context.Background())
	must.NoError(t, err)
	must.Eq(t, "4g.20gb", inv.GPUs[2].MIGDevices[0].Profile)
	must.Eq(t, "1g.10gb", inv.GPUs[2].MIGDevices[1].Profile)
}

// A MIG-enabled GPU's stats carry its MIG devices' memory, read through
// their handles; its other counters stay the GPU's.
func TestStatsMIGDevices(t *testing.T) {
	n := newDGXA100(t)
	uuids := enableMIG(t, n.devs[2], nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	n.devs[2].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 55, nvml.SUCCESS }
	stats, err := n.source(t, Options{}).Stats(context.Background())
	must.NoError(t, err)
	must.Eq(t, []devicefn.MIGStats{
		{UUID: uuids[0], MemoryUsedMiB: 100, MemoryTotalMiB: 19968},
		{UUID: uuids[1], MemoryUsedMiB: 200, MemoryTotalMiB: 4864},
	}, stats[2].MIGDevices)
	must.Eq(t, 55, stats[2].TemperatureC)
	must.SliceEmpty(t, stats[0].MIGDevices) // MIG off
}
