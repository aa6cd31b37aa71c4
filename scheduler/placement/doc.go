// Package placement is gpushare's placement core (README.md in this
// directory): a pure library that takes a cluster Snapshot and a Request and returns
// a Decision — for every allocation the node, the GPUs and the exact share
// IDs, the cell, a score and a reason — or a refusal a user can act on, and
// the opportunistic allocations to preempt when a guaranteed job needs its
// virtual cluster's capacity back.
//
// It does no I/O, starts no goroutines and reads no clock; a decision depends
// only on the snapshot, the request and the policy's seed. The live service
// and the simulator both drive it: they build a Snapshot (from decoded
// devicefn.Group values or from plain NodeSpecs), ask a Policy to Decide, and
// Apply the decision or Remove allocations as the cluster changes.
//
// Policies are selected by name: "gpushare" (cells from topology, virtual
// clusters, fragmentation gradient descent and interference-aware pairing)
// and the baselines "random", "first-fit", "best-fit", "gpu-packing", "fgd",
// "hived" and "nomad-native".
//
// The snapshot also answers what a status page needs (Node.Cells,
// Snapshot.Usage, Fragmentation) and follows the cluster as it changes
// (AddAlloc, Remove, SetHealth, AddNode, RemoveNode). Check verifies its
// invariants; tests call it after every change.
//
// A node whose plugin offers each GPU as a device group of its own
// (devicefn.Group.PerGPU) holds allocations of one group on any of its GPUs
// but never one allocation of more than one GPU (pergpu.go).
package placement
