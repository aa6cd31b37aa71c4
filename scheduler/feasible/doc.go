// Package feasible says whether Nomad's own scheduler would find a node
// feasible for a task group, before the placement core sees the node
// (Nomad's rules first: docs/gate-and-pin.md, "The pin"): the job's datacenters and
// node pool, its constraints at job, group and task level with every
// operator Nomad knows, the tasks' drivers, the device blocks (the
// gpushare one's constraints against the node's gpushare device groups,
// other devices by count), host volumes, and distinct_hosts and
// distinct_property against the job's live allocations.
//
// Each rule mirrors Nomad 1.11's scheduler (package scheduler/feasible of
// the BSL-licensed Nomad module, read but not linked): the functions say
// which one. The package is pure: job, node and allocations in, a named
// reason out. Rules are compiled once per job version and group (Cache)
// and checked per node without allocating.
package feasible
