// Package openb replays the Alibaba openb GPU traces (v2023) through the
// placement core with the FGD paper's method (USENIX ATC'23; see
// data/FGD_METHOD.md): for each seed the pod list is sorted by name,
// shuffled with Go's math/rand and tuned to 130% of the cluster's GPU
// capacity; pods arrive one by one and never depart; after every pod the
// allocated and the arrived GPU milli are recorded and binned by arrived
// demand (0..130% of capacity). The node order for ties is the FGD
// simulator's random name prefix.
//
// Validate compares the baselines with the FGD authors' published means; the
// best-cell share measures how often multi-GPU pods got the best-connected
// GPUs of their node (openb lists no topology: 8-GPU nodes are given the
// DGX-1 V100 hybrid cube-mesh and 4-GPU nodes the two-socket PCIe matrix).
//
// Limits says how far the online policies are from what is reachable on the
// same arrived pods: Offline packs them largest first with the placement
// core (same rules), UpperBound bounds any packer through the dual of a
// linear relaxation, and Strand says why the capacity left free stayed free.
package openb
