package placement

import (
	"slices"
	"unsafe"

	"github.com/gpushare/gpushare/devicefn"
)

// A decision is most often applied to the snapshot it was decided on,
// right away (decide.Step applies each before it decides the next), where
// its shares were chosen free: applying it then need not parse the share
// IDs Decide has just written nor look their GPU up again, which was a
// third of applying a pass's thousands of decisions. placedOn is what
// Decide keeps of a placement on one GPU for that. Apply uses it only
// while nothing can have changed: the same snapshot at the same version,
// no preemption, and the placement's node and share IDs still the very
// strings Decide wrote (a string cannot change in place: the same
// address and length are the same bytes). Anything else is applied as
// any allocation is (AddAlloc), share by share.
type placedOn struct {
	node *Node
	gpu  int
	idx  []int // share indices on the GPU, in the order of the IDs
	ids  *byte // where the IDs were written, one after the other (devicefn.SharesOf)
}

// placed is the placedOn of shares idx of GPU gpu of n, whose IDs ids
// are devicefn.SharesOf's.
func placed(n *Node, gpu int, idx []int, ids []string) *placedOn {
	if len(ids) == 0 || len(ids) != len(idx) {
		return nil
	}
	return &placedOn{node: n, gpu: gpu, idx: idx, ids: unsafe.StringData(ids[0])}
}

// applies reports whether p can be added to s as Decide placed it: d was
// decided on s as it is, and p names the node and the share IDs Decide
// wrote.
func (at *placedOn) applies(s *Snapshot, d *Decision, p *Placement) bool {
	if at == nil || d.on != s || d.gen != s.gen || len(d.Preempt) > 0 || p.Node != at.node.ID || len(p.Shares) != len(at.idx) {
		return false
	}
	uuid := at.node.GPUs[at.gpu].UUID
	off := 0
	for i, id := range p.Shares {
		n := devicefn.ShareIDLen(uuid, at.idx[i])
		if len(id) != n || unsafe.StringData(id) != (*byte)(unsafe.Add(unsafe.Pointer(at.ids), off)) {
			return false
		}
		off += n
	}
	return true
}

// addPlaced adds allocation a of a placement at applies to: its shares
// are known free, its CPU and memory are checked as AddAlloc checks them.
func (s *Snapshot) addPlaced(a Alloc, at *placedOn) error {
	if err := s.newID(a); err != nil {
		return err
	}
	if err := fits(a, at.node); err != nil {
		return err
	}
	rec := &allocRec{Alloc: a, node: at.node, gpus: []int{at.gpu}, shares: [][]int{slices.Clip(at.idx)}}
	rec.Shares = slices.Clone(a.Shares)
	s.commit(rec)
	s.gen++
	s.placed++
	return nil
}
