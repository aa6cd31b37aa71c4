package service

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// ruleMirror is the service's side of the feasibility mirror (package
// feasible): which of the model's nodes a group's own rules allow, as
// Nomad's scheduler checks them. It owns the compiled rules, the node
// sets the last pass found and the set each group was last decided on;
// it reads the model (c.state), under the model's lock or during a
// pass's read, and keeps its maps under the same lock.
type ruleMirror struct {
	c *cluster
	// rules caches each group's own feasibility rules; sets are the node
	// sets the last pass found groups' rules allow (feasibleNodes), kept
	// while the snapshot's nodes are the same; of is the hash of the node
	// set each group was last decided on, for the refusal it may earn
	rules *feasible.Cache
	sets  nodeSetMemo
	of    map[decide.Key]uint64
}

func newRuleMirror(c *cluster) *ruleMirror {
	return &ruleMirror{c: c, rules: feasible.NewCache(), of: map[decide.Key]uint64{}}
}

// nodeSet is where a group's own rules let Nomad place it, among the
// nodes of the snapshot (Nomad's rules first: docs/gate-and-pin.md, "The pin").
type nodeSet struct {
	// allowed are the nodes that pass, nil when every node does.
	allowed []string
	// hash identifies the set (0: every node), for refusals.
	hash uint64
	// none is why no node passes ("" when some does).
	none string
	// distinct: one allocation per node (distinct_hosts); apart: no node
	// shared with the job's other groups either (at job level).
	distinct, apart bool
	// models are feasible.Selection.Models: when not nil, the only
	// gpushare device groups the group's device block matches.
	models []string
	// limits are the group's distinct_property rules, for placing
	// several of its allocations at once.
	limits []placement.Limit
}

// skipFor leaves out of a group's rules what the pin protocol writes: the
// gate (no node meets it, by design) and, in a pinned group, the pin's own
// node constraint and per-node limit (the next pin replaces them;
// pin.PinWith) — once each: a user's own `${node.unique.id}
// set_contains_any` or `distinct_property` constraint, even one that says
// the same, is a rule of the job and is checked like any other.
func skipFor(job *api.Job, group string) feasible.Skip {
	var mine []*api.Constraint // read once, when the rules are compiled (the cache skips it)
	read := false
	chosen := map[*api.Constraint]bool{} // asked again by each rule that reads it
	return func(level feasible.Level, c *api.Constraint) bool {
		if chosen[c] {
			return true
		}
		if pin.IsGate(c) || pin.IsCarrier(c) {
			return true // a node pin's record says nothing of where it may run
		}
		if level != feasible.LevelGroup || c.LTarget != pin.NodeAttribute {
			return false
		}
		if !read {
			read = true
			if rec, ok := pin.ParseRecord(job, group); ok {
				mine = append(mine, pin.NodeConstraint(rec))
				if rec.PerNode > 0 {
					mine = append(mine, pin.PerNodeConstraint(rec))
				}
			}
		}
		for i, m := range mine {
			if m.Operand == c.Operand && m.RTarget == c.RTarget {
				mine = slices.Delete(mine, i, i+1)
				chosen[c] = true
				return true
			}
		}
		return false
	}
}

// checkFor returns the group's rules against the live allocations of its
// job, leaving out the group's own when its placement replaces them. The
// caller holds the model's lock.
func (fm *ruleMirror) checkFor(job *api.Job, group string, ownReplaced bool) (*feasible.Rules, *feasible.Check, error) {
	rules, err := fm.rules.Rules(job, group, skipFor(job, group))
	if err != nil {
		return nil, nil, err
	}
	var allocs []feasible.Alloc
	if rules.Key() == "" { // only distinct_hosts and distinct_property read them
		for _, tg := range job.TaskGroups {
			if tg == nil || tg.Name == nil || (ownReplaced && *tg.Name == group) {
				continue
			}
			for _, a := range fm.c.state.GroupAllocs(nsOf(job), *job.ID, *tg.Name) {
				allocs = append(allocs, feasible.Alloc{Group: a.TaskGroup, NodeID: a.NodeID, Node: fm.c.state.Nodes[a.NodeID]})
			}
		}
	}
	return rules, rules.With(allocs), nil
}

// feasibleNodes returns the nodes of snap that the group's own rules allow
// (computed once for groups whose rules are the same: in out.seen for the
// pass, and in out.known from the passes before while the nodes are the
// same; nodeSetMemo). The group's own allocations do not count (its
// placement replaces them). The caller holds the model's lock.
func (fm *ruleMirror) feasibleNodes(snap *placement.Snapshot, job *api.Job, group string, out *collected) (nodeSet, error) {
	rules, check, err := fm.checkFor(job, group, true)
	if err != nil {
		return nodeSet{}, err
	}
	seen := out.seen
	if k := rules.Key(); k != "" {
		if ns, ok := seen[k]; ok {
			return ns, nil
		}
		if ns, ok := out.known[k]; ok {
			seen[k] = ns
			return ns, nil
		}
	}
	nodes := snap.Nodes()
	apiNodes := make([]*api.Node, len(nodes))
	for i, n := range nodes {
		apiNodes[i] = fm.c.state.Nodes[n.ID]
	}
	sel := check.Select(apiNodes)
	allowed, models, tally := sel.Allowed, sel.Models, sel.Tally
	ns := nodeSet{distinct: rules.DistinctHosts(), apart: rules.JobDistinctHosts(), models: models}
	for _, l := range check.PropertyLimits(apiNodes) {
		ns.limits = append(ns.limits, placement.Limit{Property: l.Property, Of: l.Of, Left: l.Left, Max: l.Max})
	}
	switch {
	case len(nodes) == 0: // nothing to choose from: the placement core says so
	case len(allowed) == 0:
		ns.none = fmt.Sprintf("%s: %s; Nomad cannot place it there either. Change the job's datacenters, node pool, constraints, drivers, devices or volumes, or add nodes that meet them (checked again every pass)",
			placement.RefusedRules, tally.String())
		if strings.Contains(tally.String(), "missing devices") {
			ns.none += "; the cluster's gpushare devices: " + fm.deviceNames()
		}
	case len(allowed) < len(nodes) || models != nil:
		if len(allowed) < len(nodes) {
			ns.allowed = allowed
		}
		h := fnv.New64a()
		for _, id := range allowed {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
		for _, m := range models {
			h.Write([]byte(m))
			h.Write([]byte{1})
		}
		ns.hash = h.Sum64()
	}
	if rules.Key() != "" {
		seen[rules.Key()] = ns
	}
	return ns, nil
}

// nodeSetMemo keeps the node sets a pass found the rules of groups allow
// (by rules, feasible.Rules.Key) for the passes after, while the snapshot
// is the same and its nodes did not change (placement.Snapshot.Epoch: the
// model takes a node out and adds it again whenever its object in the
// state changes, and Select reads nothing else). Only the rules some
// node passes are kept, and only those the last pass used: a set names
// up to every node, and why none passes lists the devices of every node
// of the state, in the snapshot or not. It does not keep the snapshot
// alive (a model rebuilt drops its last one).
type nodeSetMemo struct {
	of   snapEpoch
	sets map[string]nodeSet
}

// knownNodeSets returns the node sets kept for snap, none when its nodes
// are not those they were found on. The caller holds the model's lock.
func (fm *ruleMirror) knownNodeSets(snap *placement.Snapshot) map[string]nodeSet {
	if fm.sets.of.is(snap) {
		return fm.sets.sets
	}
	return nil
}

// keepNodeSets keeps, for the next pass, the node sets a pass on snap
// used (seen) that some node passes. The caller holds the model's lock.
func (fm *ruleMirror) keepNodeSets(snap *placement.Snapshot, seen map[string]nodeSet) {
	sets := make(map[string]nodeSet, len(seen))
	for k, ns := range seen {
		if ns.none == "" {
			sets[k] = ns
		}
	}
	fm.sets = nodeSetMemo{of: epochOf(snap), sets: sets}
}

// narrow returns the models a request may use (feasible.Selection.Narrow).
func (ns nodeSet) narrow(models []string) []string {
	return (&feasible.Selection{Models: ns.models}).Narrow(models)
}

// keepable is keep (where a group's allocations run, to pin again as
// before) when the job's own rules still allow every one of those nodes,
// else nil: the group is decided anew among the nodes they allow.
func (ns nodeSet) keepable(keep []placement.Held) []placement.Held {
	if ns.allowed == nil {
		return keep
	}
	for _, h := range keep {
		if !slices.Contains(ns.allowed, h.Node) {
			return nil
		}
	}
	return keep
}

// failingNodes lists the nodes among ids that the current version of the
// group's job no longer allows (nodes not in the state are left to the
// caller). The caller holds the model's lock.
func (fm *ruleMirror) failingNodes(job *api.Job, group string, ids []string) []string {
	_, check, err := fm.checkFor(job, group, true)
	if err != nil {
		return nil
	}
	var out []string
	for _, id := range ids {
		if n, ok := fm.c.state.Nodes[id]; ok && check.Reason(n) != "" {
			out = append(out, id)
		}
	}
	return out
}

// holdable is model.State.Feasible: the nodes a pinned group's missing
// allocations may still be placed on by Nomad, so that its shares are held
// there only. The caller holds the model's lock.
func (fm *ruleMirror) holdable(job *api.Job, group string) func(node string) bool {
	_, check, err := fm.checkFor(job, group, true)
	if err != nil {
		return nil
	}
	return func(id string) bool {
		n, ok := fm.c.state.Nodes[id]
		return ok && check.Reason(n) == ""
	}
}

// noteFeasible remembers the node set a group was decided on, for the
// refusal it may earn. The caller holds the model's lock.
func (fm *ruleMirror) noteFeasible(k decide.Key, ns nodeSet) {
	if fm.of == nil {
		fm.of = map[decide.Key]uint64{}
	}
	fm.of[k] = ns.hash
}

// forget drops the rules no group read since the last sweep and, when
// a job went (gone), what concerned groups whose job is gone. The caller
// does not hold the model's lock.
func (fm *ruleMirror) forget(gone bool) {
	if gone {
		dropGone(fm.c, fm.of)
	}
	fm.rules.Sweep()
}

// decidedOn is the hash of the node set group k was last decided on (0:
// every node). The caller holds the model's lock.
func (fm *ruleMirror) decidedOn(k decide.Key) uint64 { return fm.of[k] }

// deviceNames lists the gpushare device groups the cluster's nodes offer
// ("nvidia/gpushare/<model>"), for a request whose device no node has.
// The caller holds the model's lock.
func (fm *ruleMirror) deviceNames() string {
	set := map[string]bool{}
	for _, n := range fm.c.state.Nodes {
		if n.NodeResources == nil {
			continue
		}
		for _, d := range n.NodeResources.Devices {
			if d.Vendor+"/"+d.Type == pin.DeviceName {
				set[pin.DeviceName+"/"+d.Name] = true
			}
		}
	}
	if len(set) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}
