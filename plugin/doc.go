// Package plugin is the gpushare Nomad device plugin: it exposes every GPU
// as shares_per_gpu fractional instances (IDs "<GPU UUID>:<k>"), describes
// the GPUs' NVLink/PCIe topology in its device-group attributes, reports
// health and stats, and enforces the share rules at Reserve
// (docs/device-contract.md), starting with sharing = "mps" one MPS control
// daemon per reservation whose defaults are its limits (mpsd.go). A GPU in
// MIG mode offers its MIG instances instead, one whole instance per task,
// or with mig_instances = "shared" each instance as shares of its own
// (migshare.go), and gets the mig block's layout when idle (mig.go). Whole
// GPUs form one device group per model on a node, or with device_groups =
// "gpu" one group per GPU (devicefn.GPUGroup), Reserve unchanged. It sees
// GPUs only through a devicefn.Source: NVML on real hardware, a fixture
// file elsewhere.
package plugin
