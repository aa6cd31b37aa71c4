package nvml

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

// nvidiaVendorID is NVIDIA's PCI vendor ID, the low 16 bits of
// PciInfo.PciDeviceId.
const nvidiaVendorID = 0x10de

// nvlinks counts a GPU's active NVLinks by where they lead.
type nvlinks struct {
	// toGPU[j] is the number of links straight to GPU j (by position).
	toGPU []int
	// toSwitch is the number of links to NVSwitches.
	toSwitch int
}

// linkMatrix builds the GPU-to-GPU matrix in the vocabulary of
// `nvidia-smi topo -m`.
//
// NVLink: every link in FEATURE_ENABLED state counts towards the GPU at its
// remote end. A link whose remote PCI device is not a GPU of this node
// leads to an NVSwitch (its remote is an NVIDIA device or unknown); links to
// a device of another vendor (the CPU of an IBM POWER9 node) are ignored.
// Two GPUs that both reach NVSwitches are NV<min(switch links of each)>:
// every switch links every GPU, so the pair's bandwidth is bounded by the
// GPU with fewer switch links. This is how nvidia-smi shows NV12 on a DGX
// A100 (12 links per GPU to six NVSwitches) and NV18 on a DGX H100. Direct
// links and switch links add up. NOT_SUPPORTED (and INVALID_ARGUMENT past
// the GPU's last link) means no NVLink.
//
// Pairs without NVLink take their PCIe level from
// GetTopologyCommonAncestor; if NVML cannot tell, SYS, the most
// conservative level.
//
// Each direction is read on its own; when the two disagree (a link whose
// state one end could not read) the better link wins for both.
func (s *Source) linkMatrix(ctx context.Context, facts []devicefn.GPU) (devicefn.Matrix, error) {
	n := len(s.gpus)
	byBus := make(map[string]int, n)
	for i, f := range facts {
		if f.PCIBusID != "" {
			byBus[busKey(f.PCIBusID)] = i
		}
	}

	counts := make([]nvlinks, n)
	for i, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := s.countNVLinks(g, i, byBus, n)
		if err != nil {
			return nil, err
		}
		counts[i] = c
	}

	m := make(devicefn.Matrix, n)
	for i := range n {
		m[i] = make([]devicefn.Link, n)
		for j := range n {
			if i == j {
				m[i][j] = devicefn.Link{Kind: devicefn.LinkSelf}
				continue
			}
			nv := counts[i].toGPU[j]
			if counts[i].toSwitch > 0 && counts[j].toSwitch > 0 {
				nv += min(counts[i].toSwitch, counts[j].toSwitch)
			}
			if nv > 0 {
				m[i][j] = devicefn.Link{Kind: devicefn.LinkNVLink, NVLinks: nv}
				continue
			}
			kind, err := s.pcieLink(s.gpus[i], s.gpus[j])
			if err != nil {
				return nil, err
			}
			m[i][j] = devicefn.Link{Kind: kind}
		}
	}

	for i := range n {
		for j := i + 1; j < n; j++ {
			fwd, rev := m[i][j], m[j][i]
			if fwd == rev {
				continue
			}
			best := fwd
			if rev.Better(fwd) {
				best = rev
			}
			s.logger.Debug("the GPUs of a pair see their link differently; taking the better one",
				"gpu_a", s.gpus[i].index, "gpu_b", s.gpus[j].index,
				"a_to_b", fwd.String(), "b_to_a", rev.String(), "link", best.String())
			m[i][j], m[j][i] = best, best
		}
	}
	return m, nil
}

// countNVLinks counts the active NVLinks of GPU g (at position self).
func (s *Source) countNVLinks(g *gpu, self int, byBus map[string]int, n int) (nvlinks, error) {
	c := nvlinks{toGPU: make([]int, n)}
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := g.dev.GetNvLinkState(l)
		switch {
		case ret == nvml.SUCCESS:
		case ret == nvml.ERROR_GPU_IS_LOST:
			return c, gpuErr(g, fmt.Sprintf("read state of NVLink %d", l), ret)
		case unsupported(ret) || ret == nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			s.logger.Debug("cannot read NVLink state; treating the link as down",
				"gpu_index", g.index, "nvlink", l, "error", ret)
			continue
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}

		remote, ret := g.dev.GetNvLinkRemotePciInfo(l)
		switch {
		case ret == nvml.ERROR_GPU_IS_LOST:
			return c, gpuErr(g, fmt.Sprintf("read remote PCI info of NVLink %d", l), ret)
		case ret != nvml.SUCCESS:
			s.logger.Debug("cannot read the remote end of an active NVLink; counting it as an NVSwitch link",
				"gpu_index", g.index, "nvlink", l, "error", ret)
			c.toSwitch++
			continue
		}
		bus := pciBusID(remote)
		if j, ok := byBus[busKey(bus)]; ok {
			if j != self {
				c.toGPU[j]++
			}
			continue
		}
		if vendor := remote.PciDeviceId & 0xffff; vendor != 0 && vendor != nvidiaVendorID {
			s.logger.Debug("ignoring NVLink to a device of another vendor",
				"gpu_index", g.index, "nvlink", l, "remote_pci_bus_id", bus, "remote_pci_device_id", fmt.Sprintf("%#08x", remote.PciDeviceId))
			continue
		}
		c.toSwitch++
	}
	if c.toSwitch > 0 {
		s.logger.Debug("found NVLinks to NVSwitches", "gpu_index", g.index, "nvlinks", c.toSwitch)
	}
	return c, nil
}

// pcieLink reads the PCIe level between two GPUs without NVLink.
func (s *Source) pcieLink(a, b *gpu) (devicefn.LinkKind, error) {
	level, ret := a.dev.GetTopologyCommonAncestor(b.dev)
	switch {
	case ret == nvml.SUCCESS:
	case ret == nvml.ERROR_GPU_IS_LOST:
		return 0, gpuErr(a, fmt.Sprintf("read PCIe topology to GPU %d", b.index), ret)
	default:
		s.logger.Debug("cannot read PCIe topology; reporting SYS",
			"gpu_a", a.index, "gpu_b", b.index, "error", ret)
		return devicefn.LinkSYS, nil
	}
	return linkKind(level), nil
}

// linkKind maps NVML's topology level to the topo -m kind.
func linkKind(level nvml.GpuTopologyLevel) devicefn.LinkKind {
	switch level {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return devicefn.LinkPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return devicefn.LinkPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return devicefn.LinkPHB
	case nvml.TOPOLOGY_NODE:
		return devicefn.LinkNODE
	default:
		return devicefn.LinkSYS
	}
}
