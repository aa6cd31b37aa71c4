package service

import (
	"cmp"
	"slices"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// stays lists the running allocations of a group pinned by node
// (pin.ContractNode) that stay where they run when the group is pinned
// again (scaled past its pin, a node drained or lost, a GPU lost, a
// refusal): those on a node that is up and not draining, not one the
// group lost, whose GPUs are healthy. Nomad keeps them in place under a
// pin that names their nodes (docs/device-contract.md, "A pin Nomad
// checks in place"), as it would without gpushare; the step decides only
// the others (decide.Group.Stay). At most the count less one stay: a
// group pinned again has an allocation to place. A group pinned by
// shares has none: its new pin replaces every allocation. The caller
// holds s.mu.
func (s *loop) stays(job *api.Job, tg *api.TaskGroup, facts lifecycle.Group, lost []string) []placement.Held {
	if !facts.NodePin || !s.cfg.InPlacePinsOn() {
		return nil
	}
	live := slices.Clone(s.state.GroupAllocs(*job.Namespace, *job.ID, *tg.Name))
	slices.SortFunc(live, func(a, b *api.Allocation) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) }) // the oldest stay first
	var out []placement.Held
	for _, a := range live {
		if len(out) >= pin.Count(tg)-1 {
			break
		}
		n := s.state.Nodes[a.NodeID]
		shares := model.Shares(a)
		if n == nil || n.Status != api.NodeStatusReady || n.Drain || slices.Contains(lost, a.NodeID) || len(shares) == 0 ||
			a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		sick := model.UnhealthyGPUs(n)
		if slices.ContainsFunc(shares, func(sh string) bool { return slices.Contains(sick, model.GPUOf(sh)) }) {
			continue
		}
		out = append(out, placement.Held{Node: a.NodeID, Shares: shares})
	}
	return out
}

// replacedBy lists the running allocations a pin just registered makes
// Nomad replace: every one under a pin by shares (a change of a device
// block's constraints is destructive for the whole group); under a node
// pin that follows a node pin, only those on nodes the new pin leaves out
// (the rest pass Nomad's in-place check on their own node).
func replacedBy(orig *api.Job, group string, rec *pin.Record, running []*api.Allocation) []string {
	old, ok := pin.ParseRecord(orig, group)
	inPlace := ok && rec != nil && old.Contract == pin.ContractNode && rec.Contract == pin.ContractNode && !slices.Contains(pin.Gated(orig), group)
	var out []string
	for _, a := range running {
		if !inPlace || !slices.Contains(rec.Nodes, a.NodeID) {
			out = append(out, a.ID)
		}
	}
	return out
}
