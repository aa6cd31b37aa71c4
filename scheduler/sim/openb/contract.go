package openb

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// Device contracts a replay can model (docs/device-contract.md): how the
// plugin offers GPUs to Nomad and how much of the scheduler's choice a pin
// carries. The placement policy is the same in all.
const (
	// ContractModel is the default: one device group per GPU model on a
	// node; the pin names the shares, so Nomad takes exactly the
	// scheduler's GPUs, a multi-GPU request included.
	ContractModel = "model"
	// ContractGPU is one device group per GPU (device_groups = "gpu"),
	// the pin still naming the shares: the same GPUs as ContractModel,
	// but Nomad takes a request's instances from one group, so a pod of
	// several GPUs cannot be placed.
	ContractGPU = "gpu"
	// ContractGPUNode is one device group per GPU with a pin that names
	// only the node (a group constraint Nomad checks in place): the
	// scheduler chooses the node, Nomad the GPU on it
	// (placement.Snapshot.NomadPicksGPU), and multi-GPU pods cannot be
	// placed either.
	ContractGPUNode = "gpu-node"
	// ContractGPUNodeFirst is ContractGPUNode with a fixed device affinity
	// on the GPU's index in every request: Nomad takes the lowest-indexed
	// GPU with room on the pinned node (placement.Snapshot.NomadPicksFirstGPU).
	ContractGPUNodeFirst = "gpu-node-first"
	// ContractGPUNodeMulti is ContractGPUNodeFirst on nodes whose plugin
	// runs the interposer, which composes several GPUs in one task
	// (devicefn.Group.MultiGPU): a pod of k GPUs is asked as k device
	// blocks of one GPU's shares, and Nomad takes the node's k
	// lowest-indexed wholly free GPUs (placement.Snapshot.NomadPicksFirstGPU);
	// the nodes are built per GPU (placement.NodeSpec.PerGPU, MultiGPU).
	ContractGPUNodeMulti = "gpu-node-multi"
	// ContractGPUNodeMultiPick is ContractGPUNodeMulti where the policy
	// decides what Nomad will do, as the service's decision step does
	// under node pins (decide.Config.InPlacePins): a pod of several GPUs
	// is scored on each node by the GPUs Nomad will take there and the
	// cell they form (placement.Request.NomadPicksFirst), so it goes where
	// Nomad's pick is the best cell.
	ContractGPUNodeMultiPick = "gpu-node-multi-pick"
	// ContractGPUNodeRank is ContractGPUNodeMultiPick with the affinities
	// a group's first node pin writes now: on the GPU's rank in its node's
	// cell order, which the plugin fingerprints (devicefn.AttrCellRank;
	// the nodes are built with placement.NodeSpec.CellRanks), so Nomad
	// takes a node's GPUs best cell first (DGX-1: 0, 3, 1, 2, 4, 7, 5, 6)
	// rather than by index, and the policy decides by that pick. What is
	// built; ContractGPUNodeMultiPick is a group an older pin gave index
	// affinities (placement.Request.NomadIndexOrder).
	ContractGPUNodeRank = "gpu-node-rank"
)

// Contracts lists them in the order reports show them.
var Contracts = []string{ContractModel, ContractGPU, ContractGPUNode, ContractGPUNodeFirst, ContractGPUNodeMulti, ContractGPUNodeMultiPick, ContractGPUNodeRank}

// composes reports whether contract c's nodes are per GPU with a plugin
// that composes several GPUs in one task.
func composes(c string) bool {
	return c == ContractGPUNodeMulti || c == ContractGPUNodeMultiPick || c == ContractGPUNodeRank
}

// offer applies a contract to the policy's decisions.
type offer struct {
	contract string
	rng      *rand.Rand
}

func newOffer(contract string, seed int64) *offer {
	return &offer{contract: contract, rng: rand.New(rand.NewPCG(uint64(seed), 0x6e6f6d6164))}
}

// decide is the policy's decision for pod p as the contract lets Nomad
// carry it out.
func (o *offer) decide(s *placement.Snapshot, pol placement.Policy, p Pod) *placement.Decision {
	r := Request(p)
	if o.contract != ContractModel && !composes(o.contract) && o.contract != "" && p.NumGPU > 1 {
		return &placement.Decision{Request: r.ID, Policy: pol.Name(), Refusal: &placement.Refusal{Code: placement.RefusedTooLarge,
			Message: fmt.Sprintf("%d GPUs in one request: with one device group per GPU Nomad takes a request's instances from one group", p.NumGPU)}}
	}
	r.NomadPicksFirst = o.contract == ContractGPUNodeMultiPick || o.contract == ContractGPUNodeRank
	// the contracts before cell ranks wrote index affinities; on their
	// nodes, which fingerprint no ranks, Nomad's order is the index's anyway
	r.NomadIndexOrder = o.contract != ContractGPUNodeRank
	d := pol.Decide(s, r)
	switch o.contract {
	case ContractGPUNode:
		s.NomadPicksGPU(d, o.rng)
	case ContractGPUNodeFirst, ContractGPUNodeMulti, ContractGPUNodeMultiPick, ContractGPUNodeRank:
		s.NomadPicksFirstGPU(d)
	}
	return d
}

// ReplayContract is Replay of one policy under a device contract.
func ReplayContract(trace, policy, contract string, seed int64, nodes []Node, w Workload, mix placement.Mix) (*Result, error) {
	if !slices.Contains(Contracts, contract) {
		return nil, fmt.Errorf("device contract %q: want one of %s", contract, strings.Join(Contracts, ", "))
	}
	return replay(trace, policy, seed, nodes, w, mix, nil, 0, contract)
}
