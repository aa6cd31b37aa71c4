package nvml

import (
	"context"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

func profilesOf(t *testing.T, src *Source, gpu int) []string {
	t.Helper()
	inv, err := src.Inventory(context.Background())
	must.NoError(t, err)
	var out []string
	for _, m := range inv.GPUs[gpu].MIGDevices {
		out = append(out, m.Profile)
	}
	return out
}

func TestApplyMIGLayout(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[1], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	src := n.source(t, Options{})
	uuid := n.devs[1].UUID

	must.NoError(t, src.ApplyMIGLayout(context.Background(), uuid, []string{"1g.5gb", "3g.20gb", "2g.10gb", "1g.5gb"}))
	// largest first, each GPU instance filled by one compute instance
	must.Eq(t, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, profilesOf(t, src, 1))

	// the same layout again changes nothing
	before := n.devs[1].GpuInstanceCounter
	must.NoError(t, src.ApplyMIGLayout(context.Background(), uuid, []string{"2g.10gb", "1g.5gb", "1g.5gb", "3g.20gb"}))
	must.Eq(t, before, n.devs[1].GpuInstanceCounter)
}

func TestApplyMIGLayoutLeavesBusyGPU(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	n.devs[0].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 4242}}, nvml.SUCCESS
	}
	src := n.source(t, Options{})
	err := src.ApplyMIGLayout(context.Background(), n.devs[0].UUID, []string{"3g.20gb", "3g.20gb"})
	must.ErrorIs(t, err, devicefn.ErrGPUBusy)
	must.ErrorContains(t, err, "stay as they are until it is idle")
	must.Eq(t, []string{"7g.40gb"}, profilesOf(t, src, 0))
}

func TestApplyMIGLayoutRefusals(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	src := n.source(t, Options{})

	err := src.ApplyMIGLayout(context.Background(), n.devs[0].UUID, []string{"3g.20gb", "5g.99gb"})
	must.ErrorIs(t, err, devicefn.ErrUnknownMIGProfile)
	must.ErrorContains(t, err, `"5g.99gb": this GPU has 1g.10gb, 1g.5gb, 1g.5gb+me, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb`)
	must.Eq(t, []string{"7g.40gb"}, profilesOf(t, src, 0)) // nothing destroyed

	err = src.ApplyMIGLayout(context.Background(), n.devs[0].UUID, []string{"4g.20gb", "4g.20gb"})
	must.ErrorContains(t, err, "MIG layout 4g.20gb, 4g.20gb takes 8 compute slices; the GPU has 7")
	must.Eq(t, []string{"7g.40gb"}, profilesOf(t, src, 0))

	err = src.ApplyMIGLayout(context.Background(), n.devs[2].UUID, []string{"7g.40gb"})
	must.ErrorIs(t, err, devicefn.ErrMIGModeOff)
	must.ErrorContains(t, err, "nvidia-smi -i 2 -mig 1")

	must.ErrorContains(t, src.ApplyMIGLayout(context.Background(), "GPU-nope", nil), "no GPU GPU-nope on this node")
}

// placementsOf returns where each GPU instance of a device starts, by the
// compute slices of its profile.
func placementsOf(t *testing.T, d interface {
	GetGpuInstanceProfileInfo(int) (nvml.GpuInstanceProfileInfo, nvml.Return)
	GetGpuInstances(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return)
}) map[uint32][]uint32 {
	t.Helper()
	out := map[uint32][]uint32{}
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, _ := d.GetGpuInstances(&info)
		for _, gi := range gis {
			gInfo, ret := gi.GetInfo()
			must.Eq(t, nvml.SUCCESS, ret)
			out[info.SliceCount] = append(out[info.SliceCount], gInfo.Placement.Start)
		}
	}
	for _, s := range out {
		slices.Sort(s)
	}
	return out
}

// A 3g.20gb and two 2g.10gb fit an A100 only with the 3g at memory slice
// 4 (2g instances start at 0, 2 or 4): the layout is planned over NVML's
// possible placements and created there, not left to NVML's choice one
// instance at a time.
func TestApplyMIGLayoutPlansPlacements(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[1], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	src := n.source(t, Options{})
	must.NoError(t, src.ApplyMIGLayout(context.Background(), n.devs[1].UUID, []string{"2g.10gb", "3g.20gb", "2g.10gb"}))
	must.Eq(t, map[uint32][]uint32{3: {4}, 2: {0, 2}}, placementsOf(t, n.devs[1]))
}

// A layout whose slices add up but that has no placement is refused
// before anything is destroyed.
func TestApplyMIGLayoutWithoutPlacement(t *testing.T) {
	n := newDGXA100(t)
	enableMIG(t, n.devs[0], nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	real := n.devs[0].GetGpuInstancePossiblePlacementsFunc
	n.devs[0].GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		if info.SliceCount == 3 { // a driver that allows a 3g.20gb only at 0
			return []nvml.GpuInstancePlacement{{Start: 0, Size: 4}}, nvml.SUCCESS
		}
		return real(info)
	}
	src := n.source(t, Options{})
	err := src.ApplyMIGLayout(context.Background(), n.devs[0].UUID, []string{"3g.20gb", "3g.20gb"})
	must.ErrorIs(t, err, errNoPlacement)
	must.ErrorContains(t, err, "MIG layout 3g.20gb, 3g.20gb: NVIDIA allows no placement")
	must.Eq(t, []string{"7g.40gb"}, profilesOf(t, src, 0)) // nothing destroyed
}
