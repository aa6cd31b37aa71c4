package nvml

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

var _ devicefn.MIGLayouter = (*Source)(nil)

// ApplyMIGLayout implements devicefn.MIGLayouter. It does not turn MIG
// mode on (that needs a GPU reset); on a MIG-enabled GPU with other
// instances and no compute process it destroys every compute and GPU
// instance and creates one GPU instance per profile, largest first, each
// filled by one compute instance. Should a creation fail, the GPU keeps
// the instances made so far and the error says so.
func (s *Source) ApplyMIGLayout(ctx context.Context, uuid string, profiles []string) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.recoverPanic("mig layout", &err)
	if err := s.ensure(); err != nil {
		return err
	}
	var g *gpu
	for _, c := range s.gpus {
		if c.uuid == uuid {
			g = c
		}
	}
	if g == nil {
		return fmt.Errorf("no GPU %s on this node", uuid)
	}
	facts, err := s.readGPU(g)
	if err != nil {
		return err
	}
	if !facts.MIG {
		return fmt.Errorf("gpu %d (%s): %w: enable it with nvidia-smi -i %d -mig 1 (the GPU is reset)", g.index, g.uuid, devicefn.ErrMIGModeOff, g.index)
	}
	if devicefn.SameProfiles(facts.MIGDevices, profiles) {
		return nil
	}
	procs, ret := g.dev.GetComputeRunningProcesses()
	switch {
	case ret == nvml.SUCCESS && len(procs) > 0:
		return fmt.Errorf("gpu %d (%s): %w (%d): its MIG instances stay as they are until it is idle", g.index, g.uuid, devicefn.ErrGPUBusy, len(procs))
	case ret != nvml.SUCCESS && !unsupported(ret):
		return gpuErr(g, "list running processes", ret)
	}

	// the GPU instance profiles by name
	byName := map[string]nvml.GpuInstanceProfileInfo{}
	var total uint32
	for _, gp := range giProfiles(g, facts.MemoryMiB) {
		total = max(total, gp.info.SliceCount)
		byName[gp.name] = gp.info
	}
	want := make([]nvml.GpuInstanceProfileInfo, 0, len(profiles))
	for _, p := range profiles {
		info, ok := byName[p]
		if !ok {
			known := make([]string, 0, len(byName))
			for n := range byName {
				known = append(known, n)
			}
			sort.Strings(known)
			return fmt.Errorf("gpu %d (%s, %s): %w %q: this GPU has %s", g.index, g.uuid, facts.Model, devicefn.ErrUnknownMIGProfile, p, strings.Join(known, ", "))
		}
		want = append(want, info)
	}
	var slices uint32
	for _, info := range want {
		slices += info.SliceCount
	}
	if slices > total {
		return fmt.Errorf("gpu %d (%s): MIG layout %s takes %d compute slices; the GPU has %d", g.index, g.uuid, strings.Join(profiles, ", "), slices, total)
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].SliceCount > want[j].SliceCount })
	places, err := planPlacements(g, want)
	if err != nil {
		return fmt.Errorf("gpu %d (%s): MIG layout %s: %w", g.index, g.uuid, strings.Join(profiles, ", "), err)
	}

	if err := destroyInstances(ctx, g); err != nil {
		return err
	}
	for k, info := range want {
		if err := ctx.Err(); err != nil {
			return err
		}
		var gi nvml.GpuInstance
		var ret nvml.Return
		if places != nil {
			gi, ret = g.dev.CreateGpuInstanceWithPlacement(&info, &places[k])
		} else {
			gi, ret = g.dev.CreateGpuInstance(&info)
		}
		if ret != nvml.SUCCESS {
			return gpuErr(g, fmt.Sprintf("create GPU instance %d of %d (slices %d; the GPU keeps the %d made before it)", k+1, len(want), info.SliceCount, k), ret)
		}
		if err := fillGPUInstance(g, gi, info.SliceCount); err != nil {
			return err
		}
	}
	s.logger.Info("MIG layout applied", "gpu_index", g.index, "gpu_uuid", g.uuid, "mig_profiles", profiles)
	return nil
}

// destroyInstances destroys every compute instance and GPU instance of g.
func destroyInstances(ctx context.Context, g *gpu) error {
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := g.dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := g.dev.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			continue
		}
		for _, gi := range gis {
			if err := ctx.Err(); err != nil {
				return err
			}
			for ci := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					continue
				}
				cis, ret := gi.GetComputeInstances(&ciInfo)
				if ret != nvml.SUCCESS {
					continue
				}
				for _, c := range cis {
					if ret := c.Destroy(); ret != nvml.SUCCESS {
						return gpuErr(g, "destroy a MIG compute instance", ret)
					}
				}
			}
			if ret := gi.Destroy(); ret != nvml.SUCCESS {
				return gpuErr(g, "destroy a MIG GPU instance", ret)
			}
		}
	}
	return nil
}

// fillGPUInstance creates the compute instance that takes all of gi.
func fillGPUInstance(g *gpu, gi nvml.GpuInstance, slices uint32) error {
	for ci := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS || info.SliceCount != slices {
			continue
		}
		if _, ret := gi.CreateComputeInstance(&info); ret != nvml.SUCCESS {
			return gpuErr(g, fmt.Sprintf("create a compute instance of %d slices", slices), ret)
		}
		return nil
	}
	return fmt.Errorf("gpu %d (%s): no compute instance profile fills a GPU instance of %d slices", g.index, g.uuid, slices)
}

// errNoPlacement says that the GPU has no room for a layout's instances
// side by side, though their slices add up.
var errNoPlacement = errors.New("NVIDIA allows no placement of these instances side by side on this GPU")

// planPlacements chooses, for each GPU instance profile of want (largest
// first), a placement among those NVML allows, no two overlapping, so that
// instances are created where the whole layout fits (NVML's own choice,
// one instance at a time, may put a 3g.20gb where two 2g.10gb were to go).
// It returns nil, nil when the driver does not list placements: the
// instances are then created where NVML puts them.
func planPlacements(g *gpu, want []nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, error) {
	options := make([][]nvml.GpuInstancePlacement, len(want))
	for i := range want {
		ps, ret := g.dev.GetGpuInstancePossiblePlacements(&want[i])
		if ret != nvml.SUCCESS || len(ps) == 0 {
			return nil, nil
		}
		options[i] = ps
	}
	chosen := make([]nvml.GpuInstancePlacement, len(want))
	overlaps := func(a, b nvml.GpuInstancePlacement) bool {
		return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
	}
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(want) {
			return true
		}
	next:
		for _, p := range options[i] {
			for _, q := range chosen[:i] {
				if overlaps(p, q) {
					continue next
				}
			}
			chosen[i] = p
			if place(i + 1) {
				return true
			}
		}
		return false
	}
	if !place(0) {
		return nil, errNoPlacement
	}
	return chosen, nil
}
