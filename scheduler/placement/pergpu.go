package placement

import "fmt"

// Nodes whose plugin offers each GPU as a device group of its own
// (device_groups = "gpu"; devicefn.Group.PerGPU): Nomad takes each
// allocation's shares from one GPU's group, so the allocations of a group
// never need the rules that keep them apart on a node with one group per
// model (OnePerNode, fractions stacked on one GPU), but one allocation
// never gets more than one GPU there.

// maxWhole is the most whole GPUs one allocation may hold of the group.
func (g *gpuGroup) maxWhole() int {
	if g.perGPU {
		return min(1, len(g.gpus))
	}
	return len(g.gpus)
}

// wholeSlots is how many allocations of whole GPUs each the group may
// hold under gpushare's rules: one per node with a group per model
// (OnePerNode), unless the service can stage them there (Node.stage:
// placed one after the other behind holds); one per GPU when each GPU is
// a group.
func (g *gpuGroup) wholeSlots(whole int, staged bool) int {
	if g.perGPU || staged {
		return len(g.gpus) / max(whole, 1)
	}
	return 1
}

// fracSlots is how many allocations of frac shares each the group may
// hold: those that stack on one GPU, or on every GPU when each GPU is a
// group or the node is staged.
func (g *gpuGroup) fracSlots(spg, frac int, staged bool) int {
	if g.perGPU || staged {
		return len(g.gpus) * (spg / frac)
	}
	return spg / frac
}

// perGPUNote says why an allocation of need GPUs cannot have GPUs of
// per-GPU groups.
func perGPUNote(need, spg int) string {
	return fmt.Sprintf("on nodes whose plugin offers each GPU as its own device group (device_groups = \"gpu\") one allocation holds at most one GPU "+
		"(Nomad takes a request's shares from one device group, and one device block per GPU would overwrite each other's NVIDIA_VISIBLE_DEVICES): "+
		"ask for at most %d shares per allocation and count the %d GPUs in the group's count, or use nodes with device_groups = \"model\"", spg, need)
}

// staged reports whether the service stages r's allocations on n:
// n can be staged (SetStaging), r's allocations do not end by themselves
// (Request.Batch) and r may be staged there (Request.Unstaged).
func (n *Node) staged(r *Request) bool { return n.stage && !r.Batch && !r.Unstaged.Covers(n.ID) }

// Unstaged is where the service cannot stage one request's allocations
// although it stages others' there (Request.Unstaged).
type Unstaged struct {
	// Nodes are the nodes it covers; nil covers every node.
	Nodes map[string]bool
	// Why says why, as OnePerNode's reason names it (for example: the
	// job's namespace does not allow the driver a hold runs with).
	Why string
	// Fix says what would let the service stage them ("" for the
	// troubleshooting page).
	Fix string
}

// Covers reports whether u keeps the request's allocations from being
// staged on node id (false for a nil u).
func (u *Unstaged) Covers(id string) bool { return u != nil && (u.Nodes == nil || u.Nodes[id]) }

// need is what one allocation of r counts of n's CPU and memory: its own
// resources, and at least what a hold takes on a node where the service
// stages r's allocations behind holds (Request.HoldRes).
func (n *Node) need(r *Request) Resources {
	if r.Count < 2 || r.Shares == 0 || !n.staged(r) {
		return r.Res
	}
	return Resources{CPU: max(r.Res.CPU, r.HoldRes.CPU), MemoryMiB: max(r.Res.MemoryMiB, r.HoldRes.MemoryMiB)}
}

// SetStaging marks the nodes where the service can place several
// whole-GPU allocations of one group one after the other (it holds the
// GPUs of all but one of them with a short-lived job while Nomad places
// the first, then lets them go one at a time): on the other nodes of a
// group per model, a group holds at most one whole-GPU allocation
// (OnePerNode), since Nomad takes a request's shares from the pinned set
// in any order. ok is asked once per node; nil marks none.
func (s *Snapshot) SetStaging(ok func(nodeID string) bool) {
	for _, n := range s.nodes {
		n.stage = ok != nil && ok(n.ID)
	}
}
