// Package topologies holds the link matrices of real servers, parsed from
// `nvidia-smi topo -m` outputs, so that tests and the simulator can build
// nodes that look like real hardware: a DGX-1 V100 cube-mesh, its PCIe-only
// view, a DGX A100, an HGX H100 and a 4-GPU PCIe two-socket server.
package topologies
