// Package nvml is the devicefn.Source of real NVIDIA GPUs, read through NVML
// (github.com/NVIDIA/go-nvml). It reports the driver and CUDA versions, each
// GPU's facts (UUID, model, memory, PCI bus ID, NUMA node, compute
// capability, device minor, MIG mode), the MIG devices of MIG-enabled GPUs
// (mig.go: UUID, profile named as nvidia-smi names it, memory, slices,
// /dev/nvidia-caps minors) and the GPU instance profiles they offer, the
// GPU-to-GPU link matrix built from NVLink
// state and PCIe topology as `nvidia-smi topo -m` shows it, health from
// critical XID events and lost-GPU errors, and per-GPU stats (with each
// MIG device's memory). It also
// applies MIG layouts to idle GPUs (layout.go).
//
// NVML is loaded on first use. On a node without the NVIDIA driver every
// method returns an error wrapping devicefn.ErrUnavailable instead of
// failing the plugin. Tests drive the source with go-nvml's mock servers
// (mock/dgxa100, mock/dgxh100); no GPU is needed.
package nvml
