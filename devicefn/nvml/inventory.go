package nvml

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

const mib = 1 << 20

// Inventory implements devicefn.Source. It reads the driver, every GPU's
// facts and the link matrix afresh. When a read fails after one has
// succeeded (typically a GPU that fell off the bus), it logs a warning and
// returns the last complete inventory, so that the plugin keeps the GPU's
// shares and Health reports why they are unhealthy.
func (s *Source) Inventory(ctx context.Context) (_ *devicefn.Inventory, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.recoverPanic("inventory", &err)
	if err := s.ensure(); err != nil {
		return nil, err
	}
	inv, err := s.readInventory(ctx)
	if err != nil {
		if ctx.Err() != nil || s.last == nil {
			return nil, err
		}
		if !s.usingLast {
			s.logger.Warn("cannot read the GPU inventory; reporting the last known one", "error", err)
		} else {
			s.logger.Debug("still cannot read the GPU inventory", "error", err)
		}
		s.usingLast = true
		return cloneInventory(s.last), nil
	}
	if s.usingLast {
		s.logger.Info("read the GPU inventory again")
		s.usingLast = false
	}
	s.last = inv
	return cloneInventory(inv), nil
}

func (s *Source) readInventory(ctx context.Context) (*devicefn.Inventory, error) {
	driver, ret := s.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("read NVIDIA driver version: %w", ret)
	}
	inv := &devicefn.Inventory{DriverVersion: driver, GPUs: make([]devicefn.GPU, 0, len(s.gpus))}
	cuda, ret := s.lib.SystemGetCudaDriverVersion()
	switch {
	case ret == nvml.SUCCESS:
		inv.CUDAVersion = cudaVersion(cuda)
	case unsupported(ret):
	default:
		return nil, fmt.Errorf("read CUDA driver version: %w", ret)
	}

	for _, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		facts, err := s.readGPU(g)
		if err != nil {
			return nil, err
		}
		if facts.MIG && !s.migLogged[g.uuid] {
			profiles := make([]string, len(facts.MIGDevices))
			for i, m := range facts.MIGDevices {
				profiles[i] = m.Profile
			}
			s.logger.Info("MIG-enabled GPU: offering its MIG devices", "gpu_index", g.index, "gpu_uuid", g.uuid,
				"mig_profiles", profiles)
			s.migLogged[g.uuid] = true
		}
		inv.GPUs = append(inv.GPUs, facts)
	}

	links, err := s.linkMatrix(ctx, inv.GPUs)
	if err != nil {
		return nil, err
	}
	inv.Links = links
	if err := inv.Validate(); err != nil {
		return nil, fmt.Errorf("NVML reported an invalid inventory: %w", err)
	}
	return inv, nil
}

// readGPU reads one GPU's facts. Facts a GPU does not support are left at
// their "unknown" value; any other failure is an error.
func (s *Source) readGPU(g *gpu) (devicefn.GPU, error) {
	facts := devicefn.GPU{Index: g.index, UUID: g.uuid, NUMANode: -1, Minor: -1}
	var ret nvml.Return

	if facts.Model, ret = g.dev.GetName(); ret != nvml.SUCCESS {
		return facts, gpuErr(g, "read name", ret)
	}

	mem, ret := g.dev.GetMemoryInfo()
	switch {
	case ret == nvml.SUCCESS:
		facts.MemoryMiB = mem.Total / mib
	case !unsupported(ret):
		return facts, gpuErr(g, "read memory", ret)
	}

	pci, ret := g.dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return facts, gpuErr(g, "read PCI info", ret)
	}
	facts.PCIBusID = pciBusID(pci)

	numa, ret := g.dev.GetNumaNodeId()
	switch {
	case ret == nvml.SUCCESS:
		facts.NUMANode = numa
	case ret == nvml.ERROR_GPU_IS_LOST:
		return facts, gpuErr(g, "read NUMA node", ret)
	case !unsupported(ret):
		s.logger.Debug("cannot read NUMA node; reporting -1", "gpu_index", g.index, "error", ret)
	}

	major, minor, ret := g.dev.GetCudaComputeCapability()
	switch {
	case ret == nvml.SUCCESS:
		facts.ComputeCapability = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	case !unsupported(ret):
		return facts, gpuErr(g, "read compute capability", ret)
	}

	devMinor, ret := g.dev.GetMinorNumber()
	switch {
	case ret == nvml.SUCCESS:
		facts.Minor = devMinor
	case !unsupported(ret):
		return facts, gpuErr(g, "read device minor number", ret)
	}

	current, _, ret := g.dev.GetMigMode()
	switch {
	case ret == nvml.SUCCESS:
		facts.MIG = current == nvml.DEVICE_MIG_ENABLE
	case !unsupported(ret):
		return facts, gpuErr(g, "read MIG mode", ret)
	}
	if facts.MIG {
		migs, err := s.readMIGDevices(g, facts.MemoryMiB, facts.Minor)
		if err != nil {
			return facts, err
		}
		facts.MIGDevices = migs
		facts.MIGProfiles = migProfiles(g, facts.MemoryMiB)
	}
	return facts, nil
}

// cudaVersion turns NVML's CUDA driver version (1000*major + 10*minor, for
// example 12040) into "12.4".
func cudaVersion(v int) string {
	return strconv.Itoa(v/1000) + "." + strconv.Itoa(v%1000/10)
}

// pciBusID returns the GPU's PCI bus ID in the form nvidia-smi prints,
// "00000000:06:00.0": NVML's BusId when set, else BusIdLegacy ("0000:06:00.0")
// with its domain widened, else one built from the numeric fields. It is
// empty when PciInfo holds nothing at all.
func pciBusID(p nvml.PciInfo) string {
	if id := cString(p.BusId[:]); id != "" {
		return widenDomain(id)
	}
	if id := cString(p.BusIdLegacy[:]); id != "" {
		return widenDomain(id)
	}
	if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
		return ""
	}
	return fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return strings.TrimSpace(sb.String())
}

// widenDomain pads the PCI domain of "dddd:bb:dd.f" to eight digits.
func widenDomain(id string) string {
	domain, rest, ok := strings.Cut(id, ":")
	if !ok || len(domain) >= 8 || strings.Count(rest, ":") != 1 {
		return id
	}
	return strings.Repeat("0", 8-len(domain)) + domain + ":" + rest
}

// busKey is the form in which bus IDs are compared: NVML prints hex digits
// in upper case, sysfs and some tools in lower case.
func busKey(id string) string { return strings.ToLower(widenDomain(id)) }

func cloneInventory(inv *devicefn.Inventory) *devicefn.Inventory {
	out := *inv
	out.GPUs = append([]devicefn.GPU(nil), inv.GPUs...)
	out.Links = make(devicefn.Matrix, len(inv.Links))
	for i, row := range inv.Links {
		out.Links[i] = append([]devicefn.Link(nil), row...)
	}
	return &out
}
