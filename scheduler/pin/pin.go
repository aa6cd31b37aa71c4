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
	if slices.ContainsFunc(job.Constraints, isGate) {
		job.Constraints = slices.DeleteFunc(job.Constraints, isGate)
		for _, other := range job.TaskGroups {
			if *other.Name != group && deviceRequests(other) > 0 && !slices.ContainsFunc(other.Constraints, isGate) {
				other.Constraints = append(other.Constraints, Gate())
			}
		}
	}
	rec := &Record{Policy: d.Policy}
	nodes, gpus, shares := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var reasons, cells []string
	for _, p := range d.Placements {
		nodes[p.Node] = true
		for _, g := range p.GPUs {
			gpus[g] = true
		}
		for _, s := range p.Shares {
			shares[s] = true
		}
		reasons = appendNew(reasons, p.Reason)
		cells = appendNew(cells, p.Cell)
	}
	rec.Nodes, rec.GPUs = slices.Sorted(maps.Keys(nodes)), slices.Sorted(maps.Keys(gpus))
	rec.Shares = slices.SortedFunc(maps.Keys(shares), compareShares) // GPU by GPU, :2 before :10
	rec.Reason = strings.Join(reasons, "; ")
	rec.Cell = strings.Join(cells, ",")

	tg.Constraints = slices.DeleteFunc(tg.Constraints, func(c *api.Constraint) bool {
		return isGate(c) || (c.LTarget == NodeAttribute && c.Operand == OpSetContains)
	})
	tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: NodeAttribute, Operand: OpSetContains, RTarget: strings.Join(rec.Nodes, ",")})
	if len(rec.Shares) > 0 {
		dev := device(tg)
		if dev == nil {
			return nil, fmt.Errorf("group %q has no %q device to pin", group, DeviceName)
		}
		dev.Constraints = slices.DeleteFunc(dev.Constraints, func(c *api.Constraint) bool { return c.LTarget == DeviceAttribute })
		dev.Constraints = append(dev.Constraints, &api.Constraint{LTarget: DeviceAttribute, Operand: OpSetContains, RTarget: strings.Join(rec.Shares, ",")})
	}
	if t := gpuTask(tg); t != nil {
		old, _ := ParseRecord(job, group)
		stripEnv(tg, old)
		shares := 1
		if dev := device(tg); dev != nil && dev.Count != nil {
			shares = int(*dev.Count)
		}
		rec.Env, rec.Priority = rt.runtimeEnv(Meta(job, tg)[MetaClass], shares, t.Env)
		writeEnv(t, rec.Env)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if tg.Meta == nil {
		tg.Meta = map[string]string{}
	}
	tg.Meta[MetaPlacement] = string(b)
	delete(tg.Meta, MetaSignature) // the caller signs the new placement
	return rec, nil
}

// Unpin gates group again and drops its pins and the run-time priority
// the pin wrote, so the service decides it anew (after a preemption, or
// when its pinned capacity is gone).
func Unpin(job *api.Job, group string) {
	tg := Group(job, group)
	if tg == nil {
		return
	}
	tg.Constraints = slices.DeleteFunc(tg.Constraints, func(c *api.Constraint) bool {
		return isGate(c) || (c.LTarget == NodeAttribute && c.Operand == OpSetContains)
	})
	tg.Constraints = append(tg.Constraints, Gate())
	if dev := device(tg); dev != nil {
		dev.Constraints = slices.DeleteFunc(dev.Constraints, func(c *api.Constraint) bool { return c.LTarget == DeviceAttribute })
	}
	old, _ := ParseRecord(job, group)
	stripEnv(tg, old)
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

// compareShares orders share IDs by GPU, then by index as a number.
func compareShares(a, b string) int {
	ia, ea := devicefn.ParseShareID(a)
	ib, eb := devicefn.ParseShareID(b)
	if ea != nil || eb != nil {
		return strings.Compare(a, b)
	}
	if c := strings.Compare(ia.UUID, ib.UUID); c != 0 {
		return c
	}
	return ia.Index - ib.Index
}
