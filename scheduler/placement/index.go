package placement

import (
	"container/heap"
	"strconv"
)

// nodeIndex keeps the nodes ordered by their cost for one kind of request,
// re-scoring only the nodes that changed since it was last used: it replays
// the snapshot's change log from its cursor, pushes fresh entries, and
// drops entries whose node version is stale when they reach the top.
type nodeIndex struct {
	cursor int
	h      entryHeap
	seen   []uint64 // node version last pushed, +1 (0 = never)
}

type entry struct {
	cost [3]float64
	node int32
	ver  uint64
}

type entryHeap []entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if h[i].cost != h[j].cost {
		return less(&h[i].cost, &h[j].cost)
	}
	return h[i].node < h[j].node
}
func (h entryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)   { *h = append(*h, x.(entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// indexKey identifies requests whose per-node costs are equal.
func (e *engine) indexKey(r *Request) string {
	b := e.key[:0]
	b = strconv.AppendInt(b, r.Res.CPU, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, r.Res.MemoryMiB, 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(r.Shares), 10)
	b = append(b, '|')
	b = append(b, r.Class...)
	b = append(b, '|')
	b = strconv.AppendFloat(b, r.Profile.SM, 'g', -1, 64)
	b = append(b, '|')
	b = strconv.AppendFloat(b, r.Profile.MemBW, 'g', -1, 64)
	b = append(b, '|')
	b = strconv.AppendFloat(b, r.MaxSlowdown, 'g', -1, 64)
	for _, m := range r.Models {
		b = append(b, '|')
		b = append(b, m...)
	}
	e.key = b
	return string(b)
}

// best returns the lowest-cost node for one allocation of r, using and
// updating the index for r's kind of request. ok is false when no node fits.
func (e *engine) best(s *Snapshot, r *Request) (n *Node, c cand, ok bool) {
	key := e.indexKey(r)
	ix := e.idx[key]
	if ix == nil || len(s.log)-ix.cursor > len(s.nodes) || len(ix.h) > 4*len(s.nodes)+64 {
		ix = &nodeIndex{seen: make([]uint64, len(s.nodes))}
		if old := e.idx[key]; old != nil {
			ix.seen = old.seen[:len(s.nodes)]
			clear(ix.seen)
		}
		e.idx[key] = ix
		ix.h = make(entryHeap, 0, len(s.nodes))
		for _, nd := range s.nodes {
			e.push(ix, nd, r)
		}
		heap.Init(&ix.h)
		ix.cursor = len(s.log)
	}
	for _, ni := range s.log[ix.cursor:] {
		nd := s.nodes[ni]
		if ix.seen[ni] == nd.version+1 {
			continue
		}
		if e.push(ix, nd, r) {
			heap.Fix(&ix.h, len(ix.h)-1)
		}
	}
	ix.cursor = len(s.log)
	var aside []entry
	defer func() {
		for _, x := range aside {
			heap.Push(&ix.h, x)
		}
	}()
	for len(ix.h) > 0 {
		top := ix.h[0]
		nd := s.nodes[top.node]
		if top.ver != nd.version {
			heap.Pop(&ix.h)
			continue
		}
		if r.avoids(nd.ID) {
			aside = append(aside, heap.Pop(&ix.h).(entry))
			continue
		}
		c := e.eval(nd, r, -1)
		return nd, c, c.ok
	}
	return nil, cand{}, false
}

// push scores nd and appends an entry when it fits (without restoring the
// heap order: callers Fix or Init). It reports whether it appended.
func (e *engine) push(ix *nodeIndex, nd *Node, r *Request) bool {
	ix.seen[nd.idx] = nd.version + 1
	saved := r.Avoid
	r.Avoid = nil
	c := e.eval(nd, r, -1)
	r.Avoid = saved
	if !c.ok {
		return false
	}
	ix.h = append(ix.h, entry{cost: c.cost, node: int32(nd.idx), ver: nd.version})
	return true
}
