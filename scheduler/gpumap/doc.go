// Package gpumap builds the GPU map of a Nomad cluster — per node, per GPU,
// the shares in use and by which allocation — from what Nomad's API reports,
// hides who uses the shares of namespaces a reader may not see (Hide), and
// renders it for a terminal. `gpushare status`, the demo and the
// scheduler's /v1/gpus endpoint show it.
package gpumap
