package pin

import (
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// A node pin (ContractNode) is a pin Nomad checks in place
// (docs/device-contract.md, "A pin Nomad checks in place"). Only what
// Nomad checks against an allocation's own node carries what changes from
// one pin of a group to the next: the group's node constraint
// `${node.unique.id} set_contains_any <nodes>` and two constraints that
// always hold and carry the signed record (`"gpushare.placement" !=
// "<record>"`, `"gpushare.signature" != "<signature>"`: Nomad compares
// the two literals, which differ). What Nomad treats as a destructive
// change is written once, at the group's first node pin, and never
// changes for its life: the device block's fixed affinities, which make
// Nomad take the GPUs of the node in a fixed order (the node's cell order
// under RankAffinities, what a group's first node pin writes now; index
// order under IndexAffinities, what earlier pins wrote and their groups
// keep: placement.Snapshot.NomadPicksFirstGPU), and the run-time
// environment. Nomad picks the GPU; the pin names no shares. A re-pin
// that keeps a node therefore leaves the allocations on it running, as
// Nomad alone would (a scale past the pin, a drained node, a refusal).
//
// It is only written for a decision Nomad keeps on one GPU per
// allocation (placement.Decision.InPlace: nodes whose plugin offers each
// GPU as a device group of its own). A group pinned by shares stays so
// until it is pinned again; that pin, destructive as any share pin, is
// then a node pin if the decision allows it.

// ContractNode is the Record.Contract of a node pin; "" is a share pin.
const ContractNode = "node"

// Left targets of the constraints that carry a node pin's record.
const (
	CarryPlacement = "gpushare.placement"
	CarrySignature = "gpushare.signature"
	opCarry        = "!="
)

// IndexAffinityWeight and IndexAffinities: the device affinities node
// pins wrote before cell ranks, `${device.attr.index} <= k` for k = 0 ..
// IndexAffinities-1, each of weight IndexAffinityWeight. GPU i matches
// IndexAffinities - i of them, so Nomad's device allocator, which takes
// the device group of best affinity score, takes the lowest-indexed GPU
// with room (nodes of up to IndexAffinities+1 GPUs are ordered fully). A
// group that carries them keeps them for its life (a change of a device
// block's affinities restarts its allocations); a group's first node pin
// writes RankAffinities instead.
const (
	IndexAffinityWeight = 50
	IndexAffinities     = 7
	IndexAttribute      = "${device.attr.index}"
)

// RankAttribute and RankTieBreakWeight: the device affinities a group's
// first node pin writes (RankAffinities) are IndexAffinities affinities
// `${device.attr.cell_rank} <= k` of weight IndexAffinityWeight, on the
// GPU's rank in its node's cell order that the plugin fingerprints
// (devicefn.AttrCellRank), and the index affinities again at weight
// RankTieBreakWeight. Nomad scores a GPU of rank r and index i 50·(7−r) +
// (7−i): rank first (the index list adds at most 7 < 50), so it takes a
// node's GPUs best cell first (DGX-1: 0, 3, 1, 2, 4, 7, 5, 6), which index
// order does not; on a node whose plugin predates cell ranks no GPU
// matches the rank list, and the index list, rather than Go's map order,
// decides: still the lowest index, deterministic, as the scheduler
// models it (so such nodes stay usable during a plugin upgrade).
const (
	RankAttribute      = "${device.attr." + devicefn.AttrCellRank + "}"
	RankTieBreakWeight = 1
)

// indexAffinities is the fixed list node pins wrote before cell ranks.
func indexAffinities() []*api.Affinity {
	return fixedAffinities(IndexAttribute, IndexAffinityWeight)
}

// RankAffinities is the fixed list a group's first node pin writes: the
// cell-rank affinities, then the index tie-break.
func RankAffinities() []*api.Affinity {
	return append(fixedAffinities(RankAttribute, IndexAffinityWeight), fixedAffinities(IndexAttribute, RankTieBreakWeight)...)
}

func fixedAffinities(target string, weight int8) []*api.Affinity {
	out := make([]*api.Affinity, IndexAffinities)
	for k := range out {
		out[k] = &api.Affinity{LTarget: target, Operand: "<=", RTarget: strconv.Itoa(k), Weight: ref(weight)}
	}
	return out
}

// isNodePinAffinity reports whether a is one of the fixed affinities a
// node pin writes, of either list: the pin's, never the user's.
func isNodePinAffinity(a *api.Affinity) bool {
	same := func(b *api.Affinity) bool { return sameAffinity(a, b) }
	return slices.ContainsFunc(indexAffinities(), same) || slices.ContainsFunc(RankAffinities(), same)
}

func sameAffinity(a, b *api.Affinity) bool {
	return a != nil && b != nil && a.LTarget == b.LTarget && a.Operand == b.Operand && a.RTarget == b.RTarget &&
		(a.Weight == nil) == (b.Weight == nil) && (a.Weight == nil || *a.Weight == *b.Weight)
}

// hasAll reports whether dev carries every affinity of list.
func hasAll(dev *api.RequestedDevice, list []*api.Affinity) bool {
	if dev == nil {
		return false
	}
	for _, a := range list {
		if !slices.ContainsFunc(dev.Affinities, func(b *api.Affinity) bool { return sameAffinity(a, b) }) {
			return false
		}
	}
	return true
}

// addNodeAffinities adds to each of devs (a group's gpushare blocks)
// those of the group's fixed affinities it lacks: the index affinities
// where a block of the group already carries them (an older pin's, kept
// for the group's life, byte for byte), else the cell-rank affinities.
// The same device blocks, pinned again, are written the same.
func addNodeAffinities(devs []*api.RequestedDevice) {
	list := RankAffinities()
	if slices.ContainsFunc(devs, func(d *api.RequestedDevice) bool { return hasAll(d, indexAffinities()) }) {
		list = indexAffinities()
	}
	for _, dev := range devs {
		for _, a := range list {
			if !slices.ContainsFunc(dev.Affinities, func(b *api.Affinity) bool { return sameAffinity(a, b) }) {
				dev.Affinities = append(dev.Affinities, a)
			}
		}
	}
}

// HasIndexAffinities reports whether a group's gpushare device block
// carries every index affinity of a node pin written before cell ranks:
// Nomad takes its GPUs by index (placement.Request.NomadIndexOrder).
func HasIndexAffinities(tg *api.TaskGroup) bool {
	return hasAll(device(tg), indexAffinities())
}

// HasRankAffinities reports whether a group's gpushare device block
// carries every affinity of RankAffinities: Nomad takes its GPUs in the
// node's cell order.
func HasRankAffinities(tg *api.TaskGroup) bool {
	return hasAll(device(tg), RankAffinities())
}

func carrier(target, value string) *api.Constraint {
	return &api.Constraint{LTarget: target, Operand: opCarry, RTarget: value}
}

// IsCarrier reports whether c carries a node pin's record or signature:
// it always holds and says nothing of where a group may run.
func IsCarrier(c *api.Constraint) bool {
	return c != nil && c.Operand == opCarry && (c.LTarget == CarryPlacement || c.LTarget == CarrySignature)
}

// Carried returns the placement record and signature a group's pin
// carries: in its constraints for a node pin, else in its meta (a share
// pin). Empty strings: none.
func Carried(tg *api.TaskGroup) (placement, signature string) {
	if tg == nil {
		return "", ""
	}
	for _, c := range tg.Constraints {
		if IsCarrier(c) {
			if c.LTarget == CarryPlacement {
				placement = c.RTarget
			} else {
				signature = c.RTarget
			}
		}
	}
	if placement != "" {
		return placement, signature
	}
	return tg.Meta[MetaPlacement], tg.Meta[MetaSignature]
}

// Sign writes a placement's signature where the group carries the
// placement (a node pin's constraints, or the meta).
func Sign(tg *api.TaskGroup, signature string) {
	if slices.ContainsFunc(tg.Constraints, func(c *api.Constraint) bool { return IsCarrier(c) && c.LTarget == CarryPlacement }) {
		tg.Constraints = slices.DeleteFunc(tg.Constraints, func(c *api.Constraint) bool { return IsCarrier(c) && c.LTarget == CarrySignature })
		if signature != "" {
			tg.Constraints = append(tg.Constraints, carrier(CarrySignature, signature))
		}
		return
	}
	if tg.Meta == nil {
		tg.Meta = map[string]string{}
	}
	tg.Meta[MetaSignature] = signature
}

// nodeSpread is the spread a node pin writes, once, into a group whose
// replicas spread (gpushare.replicas not "pack"): a node constraint names
// nodes, not how many allocations go to each, and Nomad alone would pack
// the group's new allocations onto one of them (binpack, and the index
// affinities that rank nodes too).
func nodeSpread() *api.Spread {
	return &api.Spread{Attribute: NodeAttribute, Weight: ref(int8(IndexAffinityWeight))}
}

func isNodeSpread(sp *api.Spread) bool {
	return sp != nil && sp.Attribute == NodeAttribute && len(sp.SpreadTarget) == 0 && sp.Weight != nil && *sp.Weight == IndexAffinityWeight
}

// writeNode puts a node pin into tg: its node constraint and the carriers
// of placement and signature (the caller signs a new placement), the
// group's fixed affinities in each of devs (its gpushare blocks:
// addNodeAffinities) and, when the group's replicas spread,
// the node spread (each once), and rec.Env in the GPU task. A share pin's
// meta goes.
func writeNode(tg *api.TaskGroup, devs []*api.RequestedDevice, rec *Record, placement, signature string, spread bool) {
	if spread && !slices.ContainsFunc(tg.Spreads, isNodeSpread) {
		tg.Spreads = append(tg.Spreads, nodeSpread())
	}
	tg.Constraints = append(tg.Constraints, NodeConstraint(rec))
	if rec.PerNode > 0 {
		tg.Constraints = append(tg.Constraints, PerNodeConstraint(rec))
	}
	tg.Constraints = append(tg.Constraints, carrier(CarryPlacement, placement))
	if signature != "" {
		tg.Constraints = append(tg.Constraints, carrier(CarrySignature, signature))
	}
	addNodeAffinities(devs)
	if t := gpuTask(tg); t != nil {
		writeEnv(t, rec.Env)
	}
	delete(tg.Meta, MetaPlacement)
	delete(tg.Meta, MetaSignature)
}

// PerNodeConstraint is the limit a node pin writes when rec.PerNode is
// set: `${node.unique.id} distinct_property <PerNode>`, a group
// constraint, checked in place like the node constraint. Nomad discounts
// the allocation it updates in place and those it stops in the same plan
// (a rolling update, a drain), so the limit holds back only allocations
// beyond the decision: a scale past the pin, a replacement Nomad would
// stack beside one that runs. Those wait, and the scheduler pins them
// where it decides (decide.Group.Stay keeps what runs); Nomad alone
// would have spread them over nodes too.
func PerNodeConstraint(rec *Record) *api.Constraint {
	return &api.Constraint{LTarget: NodeAttribute, Operand: OpDistinctProperty, RTarget: strconv.Itoa(rec.PerNode)}
}

// OpDistinctProperty is Nomad's distinct_property operator.
const OpDistinctProperty = "distinct_property"

// perNode is the most placements d puts on one node.
func perNode(nodes []string) int {
	most, on := 0, map[string]int{}
	for _, n := range nodes {
		on[n]++
		most = max(most, on[n])
	}
	return most
}

// limitsPerNode reports whether a node pin of tg limits the allocations
// per node: its replicas spread (not gpushare.replicas = "pack") and it
// deploys no canaries, which run beside the allocations they replace.
func limitsPerNode(job *api.Job, tg *api.TaskGroup) bool {
	if Meta(job, tg)[MetaReplicas] == "pack" {
		return false
	}
	for _, u := range []*api.UpdateStrategy{job.Update, tg.Update} {
		if u != nil && u.Canary != nil && *u.Canary > 0 {
			return false
		}
	}
	return true
}

// dropCarriers removes a node pin's carriers from cs.
func dropCarriers(cs []*api.Constraint) []*api.Constraint {
	return slices.DeleteFunc(cs, IsCarrier)
}
