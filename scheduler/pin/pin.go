package pin

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Constraint targets and operator of a pin.
const (
	NodeAttribute   = "${node.unique.id}"
	DeviceAttribute = "${device.ids}"
	OpSetContains   = "set_contains_any"
)

// Pin rewrites job so that Nomad places group exactly as d decided: the
// gate is replaced by `${node.unique.id} set_contains_any <nodes>`, the
// device block gets `${device.ids} set_contains_any <shares>` and the
// group's meta gpushare.placement records the decision. A gate on the job
// is moved onto its other gpushare groups first, so they keep waiting.
// Pin writes no run-time priority: see PinWith.
func Pin(job *api.Job, group string, d *placement.Decision) (*Record, error) {
	return PinWith(job, group, d, Runtime{})
}

// PinWith is Pin that also writes rt's run-time priority into the group's
// GPU task: for an opportunistic group on MPS GPUs, CUDA_MPS_CLIENT_PRIORITY
// in its env and, when rt.ThreadScale asks, a lowered
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (see Runtime). What an earlier pin
// wrote is removed first, so pinning again never stacks it and a re-pin
// onto time-sliced GPUs drops it; the record's Env lists what was written
// and its Priority says why, or why nothing was.
func PinWith(job *api.Job, group string, d *placement.Decision, rt Runtime) (*Record, error) {
	tg := Group(job, group)
	if tg == nil {
		return nil, fmt.Errorf("job %q has no group %q", *job.ID, group)
	}
	if !d.Placed() {
		return nil, fmt.Errorf("decision for %q placed nothing: %s", group, d.Refusal)
	}
	meta := Meta(job, tg)
	rec := &Record{Policy: d.Policy, Class: meta[MetaClass], VC: meta[MetaVC], Request: Digest(job, group, d.Policy), Incarnation: Incarnation(job),
		Count: len(d.Placements)}
	if d.InPlace && job.ParameterizedJob == nil { // a dispatch pool's children must stay on its GPUs
		rec.Contract = ContractNode
	}
	var nodes, gpus, shares []string
	var reasons, cells []string
	for _, p := range d.Placements {
		nodes = append(nodes, p.Node)
		gpus = append(gpus, p.GPUs...)
		shares = append(shares, p.Shares...)
		reasons = appendNew(reasons, p.Reason)
		cells = appendNew(cells, p.Cell)
	}
	if rec.Contract == ContractNode && limitsPerNode(job, tg) {
		rec.PerNode = perNode(nodes)
	}
	old, _ := ParseRecord(job, group)
	// a model, written so that it matches per-GPU groups too (models.go)
	first, _, _, _ := requestBlocks(userTask(gpuTask(tg), old))
	rec.Model, rec.ModelAs, rec.ModelOp = modelNamed(first)
	if d.InPlace || d.PerGPU { // each GPU a device group: one block per GPU (blocks.go)
		most := 0
		for _, p := range d.Placements {
			most = max(most, len(p.GPUs))
		}
		rec.Blocks = blocksOf(most)
	}
	slices.Sort(nodes)
	slices.Sort(gpus)
	rec.Nodes, rec.GPUs = slices.Compact(nodes), slices.Compact(gpus)
	rec.Shares = sortShares(shares) // GPU by GPU, :2 before :10
	rec.Cell = strings.Join(cells, ",")
	if t := gpuTask(tg); t != nil {
		n := 1
		if dev, shares, _, ok := requestBlocks(t); ok && dev != nil {
			n = int(shares)
		}
		user := maps.Clone(t.Env)
		if old != nil {
			for k, v := range old.Env { // what an earlier pin wrote is not the user's
				if user[k] == v {
					delete(user, k)
				}
			}
		}
		rec.Env, rec.Priority = rt.runtimeEnv(meta[MetaClass], n, user)
		rec.Env, rec.Priority = rt.timesliceEnv(meta, user, rec.Env, rec.Priority)
		if rec.Contract == ContractNode && old != nil && old.Contract == ContractNode {
			// a node pin never changes the task's environment (a destructive
			// change): the group keeps what its first node pin wrote
			rec.Env, rec.Priority = old.Env, old.Priority
		}
	}
	// the meta holds what the decision is, never why: the same decision
	// is the same meta, byte for byte (docs/gate-and-pin.md, "Sticky pins")
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := write(job, group, rec, string(b), ""); err != nil {
		return nil, err
	}
	rec.Reason = strings.Join(reasons, "; ")
	return rec, nil
}

// Repeat pins group exactly as an earlier version of the job was pinned:
// placement and signature are that version's gpushare.placement and
// gpushare.signature meta, written back unchanged with the constraints
// and environment they describe. A group re-registered unchanged is
// pinned byte for byte as before, so Nomad updates its allocations in
// place.
func Repeat(job *api.Job, group, placement, signature string) (*Record, error) {
	var rec Record
	if err := json.Unmarshal([]byte(placement), &rec); err != nil {
		return nil, fmt.Errorf("%w: the earlier placement of %q does not parse: %v", ErrNotPlaceable, group, err)
	}
	if err := write(job, group, &rec, placement, signature); err != nil {
		return nil, err
	}
	return &rec, nil
}

// write puts a placement into the job: the gate goes (a gate on the job
// moves onto its other gpushare groups, so they keep waiting), what an
// earlier pin of the group wrote goes, and rec's node and share
// constraints, environment and meta come in. Constraints the user wrote
// stay as written, whatever they say.
func write(job *api.Job, group string, rec *Record, placement, signature string) error {
	tg := Group(job, group)
	if tg == nil {
		return fmt.Errorf("job %q has no group %q", *job.ID, group)
	}
	dev := device(tg)
	if (len(rec.Shares) > 0 || rec.Contract == ContractNode) && dev == nil {
		return fmt.Errorf("group %q has no %q device to pin", group, DeviceName)
	}
	if slices.ContainsFunc(job.Constraints, isGate) {
		job.Constraints = slices.DeleteFunc(job.Constraints, isGate)
		for _, other := range job.TaskGroups {
			if *other.Name != group && deviceRequests(other) > 0 && !slices.ContainsFunc(other.Constraints, isGate) {
				other.Constraints = append(other.Constraints, Gate())
			}
		}
	}
	old, _ := ParseRecord(job, group)
	unpin(tg, old)
	if err := setBlocks(tg, rec.Blocks); err != nil {
		return fmt.Errorf("group %q: %w", group, err)
	}
	if rec.ModelAs != "" {
		for _, d := range gpuBlocks(tg) {
			nameModel(d, rec)
		}
	}
	if rec.Contract == ContractNode {
		writeNode(tg, gpuBlocks(tg), rec, placement, signature, Meta(job, tg)[MetaReplicas] != "pack")
		return nil
	}
	tg.Constraints = append(tg.Constraints, NodeConstraint(rec))
	if len(rec.Shares) > 0 {
		// each block of a split takes one of the GPUs whose shares it names
		for _, dev := range gpuBlocks(tg) {
			dev.Constraints = append(dev.Constraints, shareConstraint(rec))
		}
	}
	if t := gpuTask(tg); t != nil {
		writeEnv(t, rec.Env)
	}
	if tg.Meta == nil {
		tg.Meta = map[string]string{}
	}
	tg.Meta[MetaPlacement] = placement
	if signature == "" {
		delete(tg.Meta, MetaSignature) // the caller signs the new placement
	} else {
		tg.Meta[MetaSignature] = signature
	}
	return nil
}

// NodeConstraint and shareConstraint are the constraints a pin writes.
func NodeConstraint(rec *Record) *api.Constraint {
	return &api.Constraint{LTarget: NodeAttribute, Operand: OpSetContains, RTarget: strings.Join(rec.Nodes, ",")}
}

func shareConstraint(rec *Record) *api.Constraint {
	return &api.Constraint{LTarget: DeviceAttribute, Operand: OpSetContains, RTarget: strings.Join(rec.Shares, ",")}
}

// unpin removes the gate and what the pin recorded in old wrote: its
// node and share constraints (only those: a user's own
// `${node.unique.id} set_contains_any` or `${device.ids}` constraint
// stays) and its environment.
func unpin(tg *api.TaskGroup, old *Record) {
	tg.Constraints = slices.DeleteFunc(tg.Constraints, isGate)
	tg.Constraints = dropCarriers(tg.Constraints)
	if old != nil {
		tg.Constraints = dropLast(tg.Constraints, NodeConstraint(old))
		if old.PerNode > 0 {
			tg.Constraints = dropLast(tg.Constraints, PerNodeConstraint(old))
		}
		for _, dev := range gpuBlocks(tg) {
			dev.Constraints = dropLast(dev.Constraints, shareConstraint(old))
			if old.ModelAs != "" {
				unnameModel(dev, old)
			}
		}
	}
	stripEnv(tg, old)
}

// dropLast removes the last constraint of cs that is mine, the one the
// pin appended: a user's own constraint that says the same stays.
func dropLast(cs []*api.Constraint, mine *api.Constraint) []*api.Constraint {
	for i := len(cs) - 1; i >= 0; i-- {
		if sameConstraint(cs[i], mine) {
			return slices.Delete(cs, i, i+1)
		}
	}
	return cs
}

func sameConstraint(a, b *api.Constraint) bool {
	return a != nil && a.LTarget == b.LTarget && a.Operand == b.Operand && a.RTarget == b.RTarget
}

// Unpin gates group again and drops its pins and the run-time priority
// the pin wrote, so the service decides it anew (after a preemption, or
// when its pinned capacity is gone).
func Unpin(job *api.Job, group string) {
	tg := Group(job, group)
	if tg == nil {
		return
	}
	old, _ := ParseRecord(job, group)
	unpin(tg, old)
	tg.Constraints = append(tg.Constraints, Gate())
	delete(tg.Meta, MetaPlacement)
	delete(tg.Meta, MetaSignature)
}

// Pinned reports whether the group carries a gpushare pin.
func Pinned(job *api.Job, group string) bool {
	_, ok := ParseRecord(job, group)
	return ok && !slices.Contains(Gated(job), group)
}

func device(tg *api.TaskGroup) *api.RequestedDevice {
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if isOurs(d.Name) {
				return d
			}
		}
	}
	return nil
}

func appendNew(list []string, s string) []string {
	if s == "" || slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// sortShares orders share IDs by GPU, then by index as a number; an ID
// that does not parse goes by its text. Each is parsed once, not at
// every comparison: a pass sorts hundreds of thousands.
func sortShares(ids []string) []string {
	if len(ids) == 0 {
		return nil // as before: the record's JSON says null
	}
	type parsed struct {
		s  string
		id devicefn.ShareID
		ok bool
	}
	list := make([]parsed, len(ids))
	bad := false
	for i, s := range ids {
		id, err := devicefn.ParseShareID(s)
		list[i] = parsed{s: s, id: id, ok: err == nil}
		bad = bad || err != nil
	}
	slices.SortFunc(list, func(a, b parsed) int {
		if !a.ok || !b.ok {
			return strings.Compare(a.s, b.s)
		}
		if c := strings.Compare(a.id.UUID, b.id.UUID); c != 0 {
			return c
		}
		return a.id.Index - b.id.Index
	})
	out := make([]string, 0, len(list))
	var seen map[string]bool // with an ID that does not parse, equal ones may not be next to each other
	if bad {
		seen = map[string]bool{}
	}
	for i, p := range list {
		switch {
		case seen != nil:
			if seen[p.s] {
				continue
			}
			seen[p.s] = true
		case i > 0 && list[i-1].s == p.s:
			continue
		}
		out = append(out, p.s)
	}
	return out
}
