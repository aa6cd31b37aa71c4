package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

// OnGPU lists the allocations that hold shares of a GPU, sorted.
func (s *Snapshot) OnGPU(uuid string) []string {
	ref, ok := s.byUUID[uuid]
	if !ok {
		return nil
	}
	var out []string
	for _, a := range ref.node.allocs {
		if slices.Contains(a.gpus, ref.gpu) {
			out = append(out, a.ID)
		}
	}
	slices.Sort(out)
	return out
}

// SoleGPU returns the one GPU an allocation holds shares of, and its
// model; ok is false for an unknown allocation or one on no GPU or several.
func (s *Snapshot) SoleGPU(id string) (uuid, model string, ok bool) {
	a, found := s.allocs[id]
	if !found || len(a.gpus) != 1 {
		return "", "", false
	}
	g := &a.node.GPUs[a.gpus[0]]
	return g.UUID, g.Model, true
}

// Impossible returns why no state of this cluster could ever hold request
// r — more allocations than its nodes could hold even if they were empty
// and every GPU healthy, per allocation more GPUs, shares, CPU or memory
// than any node has, or a GPU model no node has — or nil when r may fit
// once capacity frees. Avoid is ignored: avoided nodes may come back.
// Allowed is honoured (the nodes the job's own rules allow are what it may
// ever have, until they change), and DistinctNodes (one allocation per
// node).
func Impossible(s *Snapshot, r Request) *Refusal {
	if err := r.Validate(); err != nil {
		return &Refusal{Code: RefusedInvalid, Message: err.Error()}
	}
	var allowed map[string]bool
	if r.Allowed != nil {
		allowed = make(map[string]bool, len(r.Allowed))
		for _, id := range r.Allowed {
			allowed[id] = true
		}
	}
	if ref := s.limited(r, allowed); ref != nil {
		return ref
	}
	ref := impossible(s, r, allowed)
	if ref != nil && allowed != nil {
		n := 0
		for _, nd := range s.nodes {
			if allowed[nd.ID] {
				n++
			}
		}
		if n == 0 {
			return &Refusal{Code: RefusedRules, Message: fmt.Sprintf("none of the cluster's %d nodes passes the job's own rules", len(s.nodes))}
		}
		ref.Message += fmt.Sprintf(" (on the %d of %d nodes the job's own rules allow)", n, len(s.nodes))
	}
	return ref
}

func impossible(s *Snapshot, r Request, allowed map[string]bool) *Refusal {
	models := "any model"
	if len(r.Models) > 0 {
		models = strings.Join(r.Models, " or ")
	}
	room, seen, maxGPUs, need := 0, false, 0, 0
	var mig []string // models of shared MIG instances seen
	largest, migFrac, migWhole := 0, 0, 0
	stacked := 0     // room if one node could hold several whole-GPU allocations
	capped := 0      // shares per GPU of a per-GPU group that limited an allocation to one GPU
	var capWhy uint8 // why capped (capNoMux, capMixed)
	var big sizes    // the nodes with the model, whatever their CPU and memory
	for _, n := range s.nodes {
		if allowed != nil && !allowed[n.ID] {
			continue
		}
		if !big.note(n, r) || n.Capacity.CPU < r.Res.CPU || n.Capacity.MemoryMiB < r.Res.MemoryMiB {
			continue
		}
		byRes := r.Count
		if r.Res.CPU > 0 {
			byRes = min(byRes, int(n.Capacity.CPU/r.Res.CPU))
		}
		if r.Res.MemoryMiB > 0 {
			byRes = min(byRes, int(n.Capacity.MemoryMiB/r.Res.MemoryMiB))
		}
		if r.DistinctNodes {
			byRes = min(byRes, 1)
		}
		if r.Shares == 0 {
			room += byRes
			stacked += byRes
			seen = true
			continue
		}
		best, most := 0, 0
		for gi := range n.groups {
			grp := &n.groups[gi]
			if !r.modelOK(grp.model) {
				continue
			}
			seen = true
			spg := n.GPUs[grp.gpus[0]].Shares
			frac, whole, ok := shareSize(r.Shares, spg)
			if grp.mig {
				mig, largest = appendUnique(mig, grp.model), max(largest, grp.cap)
				migFrac, migWhole = max(migFrac, frac), max(migWhole, whole)
			} else {
				k, why := n.wholeCap(gi, &r)
				maxGPUs = max(maxGPUs, k)
				if k < len(grp.gpus) {
					capped, capWhy = spg, capWhy|why
				}
			}
			need = max(need, whole)
			switch {
			case !ok:
			case grp.mig && (whole > 0 || frac > grp.cap):
				// instances hold fractions of their size only
			case grp.mig:
				best = max(best, min(byRes, grp.cap/frac))
				most = max(most, best)
			case whole > 0 && whole <= n.maxWhole(gi, &r):
				best = max(best, min(byRes, grp.wholeSlots(whole, n.staged(&r)))) // one allocation of the group per node, or per GPU
				most = max(most, min(byRes, len(grp.gpus)/whole))
			case frac > 0:
				best = max(best, min(byRes, grp.fracSlots(spg, frac, n.staged(&r)))) // fractions stack on one GPU
				most = max(most, best)
			}
		}
		room += best
		stacked += most
		if room >= r.Count {
			return nil
		}
	}
	if room >= r.Count || stacked >= r.Count {
		// a cluster that could hold it but for gpushare's rule of one
		// whole-GPU allocation of a group per node (OnePerNode) is not
		// refused for good: it waits, saying why
		return nil
	}
	if !seen && big.nodes == 0 {
		return &Refusal{Code: RefusedNoModel, Message: fmt.Sprintf("no node has GPUs of %s (the cluster has %s)", models, big.others())}
	}
	if !seen {
		return &Refusal{Code: RefusedTooLarge, Message: big.short(r, models)}
	}
	if need > maxGPUs {
		msg := tooManyGPUs(need, maxGPUs, largest, models, mig)
		if capped > 0 {
			msg += "; " + perGPUNote(need, capped, capWhy)
		}
		return &Refusal{Code: RefusedTooLarge, Message: msg}
	}
	if msg := onlyInstancesTooSmall(migFrac, maxGPUs, largest, models, mig); msg != "" {
		return &Refusal{Code: RefusedTooLarge, Message: msg}
	}
	return &Refusal{Code: RefusedTooLarge, Message: fmt.Sprintf("%d allocations of %d shares of %s with cpu %d and memory %d MiB each: even empty, the cluster's %d nodes could hold %d",
		r.Count, r.Shares, models, r.Res.CPU, r.Res.MemoryMiB, len(s.nodes), room)}
}

// sizes is what Impossible saw of the nodes that have a request's GPU
// model: how many, the largest CPU and memory among them and where, and
// the models of the other nodes.
type sizes struct {
	nodes            int
	cpu, mem         int64
	cpuNode, memNode string
	models           []string
}

// note counts n if it has a GPU of r's models (any node, for a request
// of no shares) and reports whether it has.
func (z *sizes) note(n *Node, r Request) bool {
	has := r.Shares == 0
	for gi := range n.groups {
		if r.modelOK(n.groups[gi].model) {
			has = true
		} else {
			z.models = appendUnique(z.models, n.groups[gi].model)
		}
	}
	if !has {
		return false
	}
	z.nodes++
	if n.Capacity.CPU > z.cpu || z.cpuNode == "" {
		z.cpu, z.cpuNode = n.Capacity.CPU, n.label()
	}
	if n.Capacity.MemoryMiB > z.mem || z.memNode == "" {
		z.mem, z.memNode = n.Capacity.MemoryMiB, n.label()
	}
	return true
}

// others lists the models the cluster has, for a request of none of them.
func (z *sizes) others() string {
	if len(z.models) == 0 {
		return "no GPUs"
	}
	slices.Sort(z.models)
	return strings.Join(z.models, ", ")
}

// short names what of r's CPU and memory no node with its GPUs has, with
// the largest such node's figure.
func (z *sizes) short(r Request, models string) string {
	what := "GPUs of " + models
	if r.Shares == 0 {
		what = "room for it"
	}
	var parts []string
	if r.Res.CPU > z.cpu {
		parts = append(parts, fmt.Sprintf("cpu %d MHz per allocation, and the largest of the %d node(s) with %s has %d MHz (node %s)", r.Res.CPU, z.nodes, what, z.cpu, z.cpuNode))
	}
	if r.Res.MemoryMiB > z.mem {
		parts = append(parts, fmt.Sprintf("memory %d MiB per allocation, and the largest of the %d node(s) with %s has %d MiB (node %s)", r.Res.MemoryMiB, z.nodes, what, z.mem, z.memNode))
	}
	if len(parts) == 0 { // each fits some node, never both on one
		return fmt.Sprintf("needs cpu %d MHz and memory %d MiB per allocation, and none of the %d node(s) with %s has both (the most cpu: %d MHz, node %s; the most memory: %d MiB, node %s)",
			r.Res.CPU, r.Res.MemoryMiB, z.nodes, what, z.cpu, z.cpuNode, z.mem, z.memNode)
	}
	return "needs " + strings.Join(parts, "; needs ") + ": lower the task's resources, or add larger nodes"
}

// Reservable reports whether the plugin's Reserve would accept these
// shares as one allocation's: a fraction of one GPU, or whole GPUs. An
// empty list, or shares of GPUs the snapshot does not know, is not judged
// (true).
func (s *Snapshot) Reservable(shares []string) bool {
	perGPU := map[string]int{}
	for _, sh := range shares {
		id, err := devicefn.ParseShareID(sh)
		if err != nil {
			return false
		}
		perGPU[id.UUID]++
	}
	for uuid, n := range perGPU {
		ref, ok := s.byUUID[uuid]
		if !ok {
			return true
		}
		g := &ref.node.GPUs[ref.gpu]
		spg := g.Shares
		if len(shares) < spg && len(perGPU) > 1 || len(shares) >= spg && n != spg {
			return false
		}
		if g.MIG() && (len(perGPU) > 1 || n >= spg || !indicesWithin(shares, g.Cap)) {
			return false // a fraction of one instance, of the shares it offers
		}
	}
	return true
}

// InUse reports whether an allocation holds a share.
func (s *Snapshot) InUse(share string) bool {
	id, err := devicefn.ParseShareID(share)
	if err != nil {
		return false
	}
	ref, ok := s.byUUID[id.UUID]
	if !ok {
		return false
	}
	g := &ref.node.GPUs[ref.gpu]
	return id.Index >= 0 && id.Index < g.Cap && g.isUsed(id.Index)
}

// OnePerNode explains, for a request of several whole-GPU allocations,
// the rule that keeps more than one of them off a node: Nomad's device
// constraint is per group and Nomad takes a request's shares from the
// allowed set in any order, so pinning two allocations' worth of whole
// GPUs on one node could hand one allocation shares of two GPUs, which
// Reserve refuses. It returns "" when the rule does not limit r (a
// fraction, a single allocation, or enough nodes that can each take one).
// Only the nodes the job's own rules allow (Allowed) count.
func OnePerNode(s *Snapshot, r Request) string {
	if r.Count < 2 || r.Shares == 0 {
		return ""
	}
	nodes := 0
	for _, n := range s.nodes {
		if !r.allows(n.ID) {
			continue
		}
		for gi := range n.groups {
			grp := &n.groups[gi]
			if !r.modelOK(grp.model) {
				continue
			}
			if _, whole, ok := shareSize(r.Shares, n.GPUs[grp.gpus[0]].Shares); ok && whole > 0 && whole <= n.maxWhole(gi, &r) && !grp.mig {
				nodes += grp.wholeSlots(whole, n.staged(&r)) // a node whose GPUs are groups, or staged, holds one per GPU
				break
			}
		}
	}
	if nodes == 0 || nodes >= r.Count {
		return ""
	}
	if r.Batch {
		return fmt.Sprintf("gpushare places at most one whole-GPU allocation of a batch group per node (Nomad's device constraint is per group: "+
			"once one allocation of the group ended, Nomad could hand the next shares of two GPUs, so they are not placed one after the other "+
			"on a node as a service's are): its %d allocations need %d nodes and %d can hold one; it waits for more nodes — "+
			"or split it into groups of count 1, or ask for %d shares in one allocation", r.Count, r.Count, nodes, r.Count*r.Shares)
	}
	where, fix := "a node with neither the raw_exec nor the exec driver", "enable raw_exec or exec on the nodes"
	if r.Unstaged != nil && r.Unstaged.Why != "" {
		where, fix = r.Unstaged.Why, cmp.Or(r.Unstaged.Fix, "see docs/troubleshooting.md")
	}
	return fmt.Sprintf("gpushare places at most one whole-GPU allocation of a group per node where it cannot hold GPUs while Nomad places them one "+
		"after the other (%s; Nomad's device constraint is per group, and Nomad "+
		"could hand one allocation shares of two GPUs): its %d allocations need %d nodes and %d can hold one; it waits for more nodes — "+
		"or %s, split it into groups of count 1, or ask for %d shares in one allocation", where, r.Count, r.Count, nodes, fix, r.Count*r.Shares)
}

// limited refuses a request whose distinct_property limits leave fewer
// places than its count on the nodes it may use, even with the job's other
// allocations gone: each value of the property takes at most Max.
func (s *Snapshot) limited(r Request, allowed map[string]bool) *Refusal {
	for _, l := range r.Limits {
		values := map[string]bool{}
		for _, n := range s.nodes {
			if v, ok := l.Of[n.ID]; ok && (allowed == nil || allowed[n.ID]) {
				values[v] = true
			}
		}
		if room := len(values) * l.Max; room < r.Count {
			names := slices.Sorted(maps.Keys(values))
			return &Refusal{Code: RefusedRules, Message: fmt.Sprintf("distinct_property %s allows %d allocation(s) per value and the nodes the job's own rules allow have %d value(s) (%s): room for %d of the group's %d allocations; Nomad cannot place them either. Lower the count, raise the limit or add nodes with other values",
				l.Property, l.Max, len(values), strings.Join(names, ", "), room, r.Count)}
		}
	}
	return nil
}
