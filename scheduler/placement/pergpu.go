package placement

import (
	"fmt"
	"strings"
)

// Nodes whose plugin offers each GPU as a device group of its own
// (device_groups = "gpu"; devicefn.Group.PerGPU): Nomad takes each
// allocation's shares from one GPU's group, so the allocations of a group
// never need the rules that keep them apart on a node with one group per
// model (OnePerNode, fractions stacked on one GPU). One allocation gets
// one GPU there, unless the node's plugin runs the interposer, which
// composes the GPUs of one task (devicefn.Group.MultiGPU): an allocation
// of k whole GPUs is then asked as k device blocks of one GPU's shares
// each, and Nomad gives each block in turn the lowest-indexed wholly free
// GPU it may take (NomadPicksFirstGPU); a request decided for such a pin
// is scored by those GPUs (Request.NomadPicksFirst). A node where the request may take
// GPUs of more than one model (the blocks name no model) could mix models
// in one allocation, so it holds one GPU per allocation of that request.

// Why an allocation is held to one GPU of a per-GPU group (wholeCap).
const (
	capNone  uint8 = 0
	capNoMux uint8 = 1 << iota // the plugin does not compose GPUs (MultiGPU off)
	capMixed                   // the request may take GPUs of several models on the node
)

// wholeCap is the most whole GPUs one allocation of r may hold of n's
// group gi, and why it is fewer than the group's GPUs (capNone when not).
func (n *Node) wholeCap(gi int, r *Request) (int, uint8) {
	g := &n.groups[gi]
	switch {
	case !g.perGPU || len(g.gpus) < 2:
		return len(g.gpus), capNone
	case !g.multiGPU:
		return 1, capNoMux
	case n.modelsFor(r) > 1:
		return 1, capMixed
	}
	return len(g.gpus), capNone
}

// maxWhole is wholeCap's count.
func (n *Node) maxWhole(gi int, r *Request) int {
	k, _ := n.wholeCap(gi, r)
	return k
}

// modelsFor is how many models of whole GPUs on n r may take: the
// device blocks of a multi-GPU allocation carry r's model constraints
// only, so Nomad takes any of them. Shared MIG instances are not counted:
// they carry no GPU index, so the index affinities rank them below every
// GPU, and the core never places whole GPUs on them.
func (n *Node) modelsFor(r *Request) int {
	k := 0
	for gi := range n.groups {
		if g := &n.groups[gi]; !g.mig && r.modelOK(g.model) {
			k++
		}
	}
	return k
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
// per-GPU groups, for the reasons why (capNoMux, capMixed) met.
func perGPUNote(need, spg int, why uint8) string {
	var parts []string
	if why&capNoMux != 0 {
		parts = append(parts, fmt.Sprintf("on nodes whose plugin offers each GPU as its own device group (device_groups = \"gpu\") and does not run the interposer, "+
			"one allocation holds at most one GPU (Nomad takes a request's shares from one device group, and one device block per GPU would overwrite each other's NVIDIA_VISIBLE_DEVICES): "+
			"run the plugin's interposer there (its GPU groups then say multi_gpu = \"interposer\"), ask for at most %d shares per allocation and count the %d GPUs in the group's count, "+
			"or use nodes with device_groups = \"model\"", spg, need))
	}
	if why&capMixed != 0 {
		parts = append(parts, fmt.Sprintf("on nodes with device_groups = \"gpu\" and GPUs of several models the job may take, one allocation holds at most one GPU "+
			"(Nomad would take each of its %d GPUs from any of the models): constrain the device to one model (${device.attr.model})", need))
	}
	return strings.Join(parts, "; ")
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
