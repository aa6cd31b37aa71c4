// Package gpumap builds the GPU map of a Nomad cluster — per node, per GPU,
// the shares in use and by which allocation — from what Nomad's API reports,
// and renders it for a terminal. `gpushare status`, the demo and the
// scheduler's /v1/gpus endpoint show it.
package gpumap
