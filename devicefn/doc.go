// Package devicefn is the one place where gpushare's device contract is written
// in code (docs/device-contract.md). It holds the Source interface through which
// the plugin sees GPUs, the topology model (link kinds and the GPU-to-GPU link
// matrix in the vocabulary of `nvidia-smi topo -m`), share IDs, and the
// encoder and decoder of the Nomad device-group attributes that carry all of
// this from the plugin, through Nomad, to the scheduler. The GPUs are offered
// either as one device group per model on a node (Group, the default) or as
// one device group per GPU (GPUGroup, the plugin's device_groups = "gpu"),
// which MergeGPUGroups turns back into per-model Groups for the scheduler.
//
// Concrete sources live in sub-packages: devicefn/nvml for real GPUs and
// devicefn/fixture for machines without GPUs.
package devicefn
