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
// the request avoids, an unhealthy GPU, shares another allocation took,
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
