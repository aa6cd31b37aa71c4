package nvml

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

// profileSuffix is what nvidia-smi appends to the names of the GPU
// instance profiles that differ from the plain "<g>g.<mem>gb" in their
// media engines or graphics support.
var profileSuffix = map[int]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all",
}

// gpuInstance is a GPU instance's profile.
type gpuInstance struct {
	profileID int
	info      nvml.GpuInstanceProfileInfo
}

// giProfile is one GPU instance profile a MIG-enabled GPU offers, named
// as nvidia-smi names it.
type giProfile struct {
	id   int
	info nvml.GpuInstanceProfileInfo
	name string
}

// giProfiles lists the GPU instance profiles g offers, in NVML's profile
// ID order; profiles NVML does not give (the GPU lacks them, MIG is off)
// are left out. totalMiB is the GPU's memory, of which a profile's name
// takes its rounded GB.
func giProfiles(g *gpu, totalMiB uint64) []giProfile {
	var out []giProfile
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := g.dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS || info.SliceCount == 0 {
			continue
		}
		name := devicefn.MIGProfileName(0, int(info.SliceCount), migMemoryGB(totalMiB, info.MemorySizeMB), profileSuffix[id])
		out = append(out, giProfile{id: id, info: info, name: name})
	}
	return out
}

// migProfiles are the MIG profiles a MIG-enabled GPU offers, by slices.
func migProfiles(g *gpu, totalMiB uint64) []devicefn.MIGProfile {
	var out []devicefn.MIGProfile
	for _, gp := range giProfiles(g, totalMiB) {
		out = append(out, devicefn.MIGProfile{Name: gp.name, Slices: int(gp.info.SliceCount), MemoryMiB: gp.info.MemorySizeMB})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Slices < out[j].Slices })
	return out
}

// readMIGDevices reads the MIG devices of a MIG-enabled GPU: the GPU
// instances with their profiles, then every MIG device handle (a compute
// instance) with its UUID, IDs and attributes. totalMiB is the parent's
// memory, from which profile names take their rounded GB.
func (s *Source) readMIGDevices(g *gpu, totalMiB uint64, minor int) ([]devicefn.MIGDevice, error) {
	gis := map[int]gpuInstance{}
	parentSlices := 0
	for id := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := g.dev.GetGpuInstanceProfileInfo(id)
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT:
			continue
		case ret != nvml.SUCCESS:
			return nil, gpuErr(g, fmt.Sprintf("read MIG GPU instance profile %d", id), ret)
		}
		parentSlices = max(parentSlices, int(info.SliceCount))
		instances, ret := g.dev.GetGpuInstances(&info)
		switch {
		case ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_NO_PERMISSION || unsupported(ret):
			// without the right to list GPU instances each MIG device's
			// own attributes name its profile (readMIGDevice)
			continue
		case ret != nvml.SUCCESS:
			return nil, gpuErr(g, fmt.Sprintf("list MIG GPU instances of profile %d", id), ret)
		}
		for _, gi := range instances {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, gpuErr(g, "read MIG GPU instance", ret)
			}
			gis[int(gii.Id)] = gpuInstance{profileID: id, info: info}
		}
	}
	if parentSlices == 0 {
		parentSlices = devicefn.DefaultMIGSlices
	}

	count, ret := g.dev.GetMaxMigDeviceCount()
	switch {
	case unsupported(ret):
		return nil, nil
	case ret != nvml.SUCCESS:
		return nil, gpuErr(g, "read the number of MIG devices", ret)
	}
	var out []devicefn.MIGDevice
	for i := range count {
		mig, ret := g.dev.GetMigDeviceHandleByIndex(i)
		switch {
		case ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT:
			continue // no MIG device in this slot
		case ret != nvml.SUCCESS:
			return nil, gpuErr(g, fmt.Sprintf("open MIG device %d", i), ret)
		}
		m, err := s.readMIGDevice(g, mig, gis, parentSlices, totalMiB, minor)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPUInstanceID != out[j].GPUInstanceID {
			return out[i].GPUInstanceID < out[j].GPUInstanceID
		}
		return out[i].ComputeInstanceID < out[j].ComputeInstanceID
	})
	return out, nil
}

func (s *Source) readMIGDevice(g *gpu, mig nvml.Device, gis map[int]gpuInstance, parentSlices int, totalMiB uint64, minor int) (devicefn.MIGDevice, error) {
	m := devicefn.MIGDevice{ParentSlices: parentSlices}
	var ret nvml.Return
	if m.UUID, ret = mig.GetUUID(); ret != nvml.SUCCESS {
		return m, gpuErr(g, "read MIG device UUID", ret)
	}
	if m.GPUInstanceID, ret = mig.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return m, gpuErr(g, "read GPU instance ID of MIG device "+m.UUID, ret)
	}
	if m.ComputeInstanceID, ret = mig.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return m, gpuErr(g, "read compute instance ID of MIG device "+m.UUID, ret)
	}
	attrs, ret := mig.GetAttributes()
	if ret != nvml.SUCCESS {
		return m, gpuErr(g, "read attributes of MIG device "+m.UUID, ret)
	}
	gi, ok := gis[m.GPUInstanceID]
	if !ok {
		// a GPU instance NVML did not list (no permission to list them):
		// the device's attributes give its size, though not a "+me" suffix
		if attrs.GpuInstanceSliceCount == 0 {
			return m, fmt.Errorf("GPU %d (%s): MIG device %s is in GPU instance %d, which NVML does not list, and has no slice count", g.index, g.uuid, m.UUID, m.GPUInstanceID)
		}
		gi = gpuInstance{profileID: -1, info: nvml.GpuInstanceProfileInfo{SliceCount: attrs.GpuInstanceSliceCount, MemorySizeMB: attrs.MemorySizeMB}}
	}
	giSlices := int(gi.info.SliceCount)
	m.Slices = int(attrs.ComputeInstanceSliceCount)
	if m.Slices == 0 {
		m.Slices = giSlices
	}
	m.MemoryMiB = attrs.MemorySizeMB
	if m.MemoryMiB == 0 {
		m.MemoryMiB = gi.info.MemorySizeMB
	}
	m.Profile = devicefn.MIGProfileName(m.Slices, giSlices, migMemoryGB(totalMiB, gi.info.MemorySizeMB), profileSuffix[gi.profileID])
	if minor >= 0 {
		m.CapMinors = s.capMinors(minor, m.GPUInstanceID, m.ComputeInstanceID)
	}
	return m, nil
}

// migMemoryGB is a profile's memory as nvidia-smi names it: its fraction
// of the GPU, rounded up to eighths, times the GPU's memory in whole GB
// (as NVIDIA's go-nvlib computes it: 19968 MiB of a 40 GB A100 is "20gb").
func migMemoryGB(totalMiB, profileMiB uint64) uint64 {
	if totalMiB == 0 {
		return (profileMiB + 1023) / 1024
	}
	frac := math.Ceil(float64(profileMiB)/float64(totalMiB)*8) / 8
	totalGB := float64((totalMiB + 1023) / 1024)
	return uint64(math.Round(frac * totalGB))
}

// capMinors reads the minors of the /dev/nvidia-caps nodes that give
// access to GPU instance gi and its compute instance ci of the GPU with
// device minor, from the driver's procfs
// (/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/access and
// .../ci<ci>/access). It returns what it finds: drivers without them give
// none, and the task then gets the MIG device without the nodes.
func (s *Source) capMinors(minor, gi, ci int) []int {
	root := s.procs.Root
	if root == "" {
		root = "/proc"
	}
	dir := filepath.Join(root, "driver/nvidia/capabilities", "gpu"+strconv.Itoa(minor), "mig", "gi"+strconv.Itoa(gi))
	var out []int
	for _, p := range []string{filepath.Join(dir, "access"), filepath.Join(dir, "ci"+strconv.Itoa(ci), "access")} {
		if n, ok := readDeviceFileMinor(p); ok {
			out = append(out, n)
		}
	}
	return out
}

// readDeviceFileMinor reads "DeviceFileMinor: <n>" from a capability file.
func readDeviceFileMinor(path string) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "DeviceFileMinor" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}
