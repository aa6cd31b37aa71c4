package service

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// What runs stays where it runs: a group re-registered unchanged keeps its
// pin (keep), one whose request changed keeps its GPUs when they fit
// (held), an ungated group is adopted only when Nomad's own placement
// cannot run (lifecycle.Reconcile), a pinned group is placed again only when its
// capacity is gone (lost), and every pin that replaces running
// allocations is counted and said (the pinner's countRestarts, pins.go).

// moves reads from the model where a group's allocations run and
// whether they stay there (keep, held, lost, inPlaceOnly, replacedAnyway,
// pinnedNodesOfOthers): derived every pass, it keeps nothing. Its methods
// read state under the model's lock or during a pass's read.
type moves struct {
	state *model.State
	// rules says which nodes a group's current rules no longer allow
	// (ruleMirror); policy is the placement policy's name (pin.Digest)
	rules  nodeRules
	policy string
}

// nodeRules is what moves asks of the feasibility mirror (feasible.go).
type nodeRules interface {
	failingNodes(job *api.Job, group string, ids []string) []string
}

var _ nodeRules = (*ruleMirror)(nil)

// keep returns held, where a gated group's allocations run, when they
// all run under the pin an earlier version of the group carried and the
// group was re-registered unchanged in everything the decision depends on
// (the same pin.Digest): the step then places it there again, and the pin
// writes that pin back byte for byte, so that Nomad updates the
// allocations in place instead of replacing them. Under a node pin each
// allocation need only run on a pinned node: Nomad chose its GPU and
// shares there. The caller holds the model's lock.
func (mv moves) keep(job *api.Job, key decide.Key, held []placement.Held) []placement.Held {
	prior, ok := mv.state.Prior(key)
	if !ok || prior.Record.Request == "" || prior.Record.Request != pin.Digest(job, key.Group, mv.policy) ||
		len(held) != len(mv.state.GroupAllocs(key.Namespace, key.Job, key.Group)) { // one holds no shares
		return nil
	}
	for _, h := range held {
		if !slices.Contains(prior.Record.Nodes, h.Node) {
			return nil
		}
		if prior.Record.Contract == pin.ContractNode {
			continue // a node pin names no share: Nomad took them, and the GPU, on the node
		}
		for _, sh := range h.Shares {
			if !slices.Contains(prior.Record.Shares, sh) {
				return nil
			}
		}
	}
	return held
}

// held is where a group's live allocations run, one entry each. The
// caller holds the model's lock.
func (mv moves) held(key decide.Key) []placement.Held {
	var out []placement.Held
	for _, a := range mv.state.GroupAllocs(key.Namespace, key.Job, key.Group) {
		if shares := model.Shares(a); len(shares) > 0 {
			out = append(out, placement.Held{Node: a.NodeID, Shares: shares})
		}
	}
	return out
}

// lost reports whether a pinned group lost allocations together with the
// capacity it was pinned to — its node is down, drained or gone, a GPU its
// missing allocations were pinned to turned unhealthy, or another
// allocation took some of its pinned shares (short: Nomad placed an
// ungated job there meanwhile), or the job's current version no longer
// allows a pinned node (its own rules: constraints, datacenters, ...) —
// so that the replacements cannot be
// placed until it is pinned elsewhere. A batch group whose pinned nodes
// that remain still have room for its missing allocations has lost
// nothing they need. It returns the nodes to avoid. The caller holds
// the model's lock.
func (mv moves) lost(job *api.Job, group string, short bool) (bool, []string) {
	rec, ok := mv.state.Record(job, group)
	if !ok {
		return false, nil
	}
	live, missing := mv.state.Missing(job, pin.Group(job, group))
	if missing == 0 {
		return false, nil
	}
	var gone []string
	for _, n := range rec.Nodes {
		node, ok := mv.state.Nodes[n]
		if !ok || !model.Usable(node) {
			gone = append(gone, n)
		}
	}
	for _, n := range mv.rules.failingNodes(job, group, rec.Nodes) { // the job's own rules changed
		if !slices.Contains(gone, n) {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 && (!pin.Batch(job) || short) {
		return true, gone
	}
	if rec.Contract == pin.ContractNode && !short {
		// Nomad takes any healthy GPU with room on a pinned node (an
		// unhealthy one offers nothing); it says when it cannot
		// (NomadFailed). Pinned again meanwhile, a replacement Nomad has
		// just placed on such a GPU could be left out of the new pin
		return false, nil
	}
	// a batch group's pin still holds its missing allocations on the
	// nodes that remain (what the gone ones held completed, or was spare):
	// Nomad places them there. Pinned again, it would run again what
	// completed (a new version: Nomad ignores the older one's completed
	// allocations of a batch job)
	if short {
		return true, nil
	}
	inUse := map[string]bool{} // GPUs the live allocations hold
	for _, a := range live {
		for _, sh := range model.Shares(a) {
			inUse[model.GPUOf(sh)] = true
		}
	}
	for _, n := range rec.Nodes {
		for _, uuid := range model.UnhealthyGPUs(mv.state.Nodes[n]) {
			if slices.Contains(rec.GPUs, uuid) && !inUse[uuid] {
				return true, nil // the core never chooses an unhealthy GPU
			}
		}
	}
	return false, nil
}

// inPlaceOnly reports whether keep (where an unchanged group's
// allocations run, to pin again as before) can only be kept outside the
// placement core: some of its nodes take no new work (ineligible or
// draining, so the snapshot leaves them out) but are up, and the job's own
// rules still allow every one of them. Nomad updates allocations in place
// on such nodes. The caller holds the model's lock.
func (mv moves) inPlaceOnly(job *api.Job, group string, keep []placement.Held) bool {
	if len(keep) == 0 {
		return false
	}
	var nodes []string
	outside := false
	for _, h := range keep {
		n, ok := mv.state.Nodes[h.Node]
		if !ok || n.Status != api.NodeStatusReady {
			return false
		}
		outside = outside || !model.Usable(n)
		nodes = append(nodes, h.Node)
	}
	return outside && len(mv.rules.failingNodes(job, group, nodes)) == 0
}

// keptAction is the pin of a group kept where it runs, as the step makes
// it (placement.Snapshot.Keep), for a group inPlaceOnly keeps.
func keptAction(key decide.Key, policy string, req placement.Request, keep []placement.Held) decide.Action {
	d := &placement.Decision{Request: req.ID, Policy: policy}
	for i, h := range keep {
		gpus := map[string]bool{}
		for _, sh := range h.Shares {
			gpus[model.GPUOf(sh)] = true
		}
		d.Placements = append(d.Placements, placement.Placement{AllocID: fmt.Sprintf("%s[%d]", req.ID, i), Node: h.Node,
			GPUs: slices.Sorted(maps.Keys(gpus)), Shares: slices.Clone(h.Shares), Reason: "kept where it runs, on a node that takes no new work"})
	}
	return decide.Action{Kind: decide.Pin, Group: key, Decision: d, Kept: true}
}

// replacedAnyway reports whether Nomad replaces the group's running
// allocations for a change of its current version even when it is pinned
// as before: the version they run (its Prior) has another pin.Spec, or
// none is known. The caller holds the model's lock.
func (mv moves) replacedAnyway(job *api.Job, key decide.Key) bool {
	prior, ok := mv.state.Prior(key)
	return !ok || prior.Spec == "" || prior.Spec != pin.Spec(job, key.Group)
}

// pinnedNodesOfOthers lists the nodes the job's groups other than group
// are pinned to (their allocations may not be there yet, so the job's
// live allocations alone do not say). The caller holds the model's lock.
func (mv moves) pinnedNodesOfOthers(job *api.Job, group string) []string {
	var out []string
	for _, tg := range job.TaskGroups {
		if *tg.Name == group || !mv.state.Pinned(job, *tg.Name) {
			continue
		}
		if rec, ok := mv.state.Record(job, *tg.Name); ok {
			out = append(out, rec.Nodes...)
		}
	}
	return out
}
