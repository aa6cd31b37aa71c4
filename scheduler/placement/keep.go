package placement

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn"
)

// Held is where one allocation of a group runs now: its node and the
// share IDs it holds.
type Held struct {
	Node   string
	Shares []string
}

// Keep is the decision that places r exactly where its allocations run
// now, one placement per held allocation, or an error saying why the
// snapshot can no longer hold them there: a node that is gone or that
// the request avoids or does not allow, an unhealthy GPU, shares another allocation took,
// shares the plugin's Reserve would refuse, or CPU and memory. It does
// not change the snapshot (Apply does); the caller has taken the held
// allocations out of it first. A group re-registered unchanged keeps its
// shares this way, so its running allocations are updated in place.
func (s *Snapshot) Keep(r *Request, policy string, held []Held) (*Decision, error) {
	if len(held) == 0 || len(held) != r.Count {
		return nil, fmt.Errorf("%d allocations run, the request asks for %d", len(held), r.Count)
	}
	d := &Decision{Request: r.ID, Policy: policy}
	for i, h := range held {
		n, ok := s.byID[h.Node]
		switch {
		case !ok:
			return nil, fmt.Errorf("node %s is not usable", h.Node)
		case r.avoids(h.Node):
			return nil, fmt.Errorf("the request avoids node %s", h.Node)
		case !r.allows(h.Node):
			return nil, fmt.Errorf("the job's own rules do not allow node %s", h.Node)
		case len(h.Shares) != r.Shares:
			return nil, fmt.Errorf("an allocation holds %d shares, the request asks for %d", len(h.Shares), r.Shares)
		case !s.Reservable(h.Shares):
			return nil, fmt.Errorf("shares %v are not one allocation's worth", h.Shares)
		}
		gpus := map[string]bool{}
		for _, sh := range h.Shares {
			id, err := devicefn.ParseShareID(sh)
			if err != nil {
				return nil, err
			}
			ref, ok := s.byUUID[id.UUID]
			if !ok || ref.node != n {
				return nil, fmt.Errorf("GPU %s is not on node %s", id.UUID, h.Node)
			}
			g := &n.GPUs[ref.gpu]
			if g.Down {
				return nil, fmt.Errorf("GPU %s is unhealthy", id.UUID)
			}
			if !r.modelOK(g.Model) {
				return nil, fmt.Errorf("GPU %s is a %s, the request asks for %v", id.UUID, g.Model, r.Models)
			}
			if s.InUse(sh) {
				return nil, fmt.Errorf("share %s is in use", sh)
			}
			gpus[id.UUID] = true
		}
		p := Placement{AllocID: r.ID + "[" + strconv.Itoa(i) + "]", Node: h.Node, GPUs: slices.Sorted(maps.Keys(gpus)),
			Shares: slices.Clone(h.Shares), Reason: "kept where it runs", Predicted: 1, PredictedMate: 1, req: r, res: r.Res}
		d.Placements = append(d.Placements, p)
	}
	// CPU, memory and shares together, as Apply will add them
	if err := s.Apply(d); err != nil {
		return nil, err
	}
	for _, p := range d.Placements {
		_, _ = s.Remove(p.AllocID)
	}
	return d, nil
}

// Prefer is the decision that places a single-allocation request r on the
// GPUs its running allocation (held) holds, when they still fit the
// request as it is now: a fraction takes the shares it held first, then
// other free shares of the same GPU; whole GPUs take held GPUs. A group
// whose request changed so keeps its GPU when it can, rather than moving
// wherever the policy would put a new group. It returns an error when the
// held GPUs cannot hold r; it does not change the snapshot.
func (s *Snapshot) Prefer(r *Request, policy string, held []Held) (*Decision, error) {
	if r.Count != 1 || len(held) != 1 || r.Shares == 0 {
		return nil, fmt.Errorf("only a single allocation of GPU shares is preferred in place")
	}
	h := held[0]
	n, ok := s.byID[h.Node]
	if !ok || r.avoids(h.Node) || !r.allows(h.Node) {
		return nil, fmt.Errorf("node %s is not usable", h.Node)
	}
	var gpus []string // the held GPUs, in the order they were held
	byGPU := map[string][]string{}
	for _, sh := range h.Shares {
		id, err := devicefn.ParseShareID(sh)
		if err != nil {
			return nil, err
		}
		if _, seen := byGPU[id.UUID]; !seen {
			gpus = append(gpus, id.UUID)
		}
		byGPU[id.UUID] = append(byGPU[id.UUID], sh)
	}
	var shares []string
	var used []string
	for _, uuid := range gpus {
		ref, ok := s.byUUID[uuid]
		if !ok || ref.node != n {
			return nil, fmt.Errorf("GPU %s is not on node %s", uuid, h.Node)
		}
		g := &n.GPUs[ref.gpu]
		if g.Down || !r.modelOK(g.Model) {
			return nil, fmt.Errorf("GPU %s cannot take the request", uuid)
		}
		frac, whole, ok := shareSize(r.Shares, g.Shares)
		switch {
		case !ok:
			return nil, fmt.Errorf("%d shares are not a fraction or whole GPUs of %s", r.Shares, uuid)
		case whole > 0 && g.MIG():
			return nil, fmt.Errorf("GPU %s is a shared MIG instance, which never holds a whole GPU", uuid)
		case frac > 0 && !timesliceKind(g, r):
			return nil, fmt.Errorf("GPU %s holds time-sliced allocations and others: a GPU holds one kind", uuid)
		case frac > 0:
			shares = freeShares(s, g, byGPU[uuid], frac)
			if len(shares) < frac {
				return nil, fmt.Errorf("GPU %s has %d shares free", uuid, len(shares))
			}
			used = []string{uuid}
		case whole > len(used):
			all := freeShares(s, g, nil, g.Shares)
			if len(all) < g.Shares {
				return nil, fmt.Errorf("GPU %s is not free", uuid)
			}
			shares = append(shares, all...)
			used = append(used, uuid)
		}
		if frac > 0 || len(used) == whole {
			break
		}
	}
	if len(shares) != r.Shares {
		return nil, fmt.Errorf("the held GPUs hold %d of %d shares", len(shares), r.Shares)
	}
	d := &Decision{Request: r.ID, Policy: policy, Placements: []Placement{{AllocID: r.ID + "[0]", Node: h.Node, GPUs: slices.Sorted(slices.Values(used)),
		Shares: shares, Reason: "stays on the GPUs it holds", Predicted: 1, PredictedMate: 1, req: r, res: r.Res}}}
	if err := s.Apply(d); err != nil {
		return nil, err
	}
	_, _ = s.Remove(d.Placements[0].AllocID)
	return d, nil
}

// freeShares lists up to n free shares of g: those of first that are
// free, then the lowest free indexes.
func freeShares(s *Snapshot, g *GPU, first []string, n int) []string {
	var out []string
	taken := map[string]bool{}
	for _, sh := range first {
		if len(out) < n && !s.InUse(sh) {
			out = append(out, sh)
			taken[sh] = true
		}
	}
	for k := 0; k < g.Shares && len(out) < n; k++ {
		if sh := (devicefn.ShareID{UUID: g.UUID, Index: k}).String(); !g.isUsed(k) && !taken[sh] {
			out = append(out, sh)
		}
	}
	return out
}
