package placement

import "strconv"

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

// entryHeap is a binary min-heap of entries (by cost, then node index),
// written out so that pushes do not box entries.
type entryHeap []entry

func (h entryHeap) less(i, j int) bool {
	if h[i].cost != h[j].cost {
		return less(&h[i].cost, &h[j].cost)
	}
	return h[i].node < h[j].node
}

func (h entryHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h entryHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func (h entryHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *entryHeap) pop() entry {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
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
	b = strconv.AppendFloat(b, e.bound(r.MaxSlowdown), 'g', -1, 64)
	for _, m := range r.Models {
		b = append(b, '|')
		b = append(b, m...)
	}
	if r.Timeslice {
		b = append(b, "|timeslice"...)
	}
	if r.NomadPicksFirst {
		b = append(b, "|nomadfirst"...)
		if r.NomadIndexOrder {
			b = append(b, "|byindex"...)
		}
	}
	if r.Allowed != nil {
		b = append(b, "|allowed:"...)
		b = strconv.AppendUint(b, e.allowKey, 16)
	}
	e.key = b
	return string(b)
}

// best returns the lowest-cost node for one allocation of r, using and
// updating the index for r's kind of request. ok is false when no node fits.
func (e *engine) best(s *Snapshot, req *Request) (n *Node, c cand, ok bool) {
	if req.Allowed != nil && len(req.Allowed)*8 < len(s.nodes) {
		return e.bestAmong(s, req) // a few nodes: no index needed
	}
	ir := *req
	ir.Avoid = nil // an index per Allowed set: its entries are the allowed nodes
	r := &ir
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
		ix.h.init()
		ix.cursor = len(s.log)
	}
	for _, ni := range s.log[ix.cursor:] {
		nd := s.nodes[ni]
		if ix.seen[ni] == nd.version+1 {
			continue
		}
		if e.push(ix, nd, r) {
			ix.h.up(len(ix.h) - 1)
		}
	}
	ix.cursor = len(s.log)
	var aside []entry
	defer func() {
		for _, x := range aside {
			ix.h = append(ix.h, x)
			ix.h.up(len(ix.h) - 1)
		}
	}()
	for len(ix.h) > 0 {
		top := ix.h[0]
		nd := s.nodes[top.node]
		if top.ver != nd.version {
			ix.h.pop()
			continue
		}
		if req.avoids(nd.ID) {
			aside = append(aside, ix.h.pop())
			continue
		}
		c := e.eval(nd, req, -1)
		return nd, c, c.ok
	}
	return nil, cand{}, false
}

// push scores nd and appends an entry when it fits (without restoring the
// heap order: callers Fix or Init). It reports whether it appended.
func (e *engine) push(ix *nodeIndex, nd *Node, r *Request) bool {
	ix.seen[nd.idx] = nd.version + 1
	c := e.eval(nd, r, -1)
	if !c.ok {
		return false
	}
	ix.h = append(ix.h, entry{cost: c.cost, node: int32(nd.idx), ver: nd.version})
	return true
}

// bestAmong is best for a request that allows a few nodes: it scores those
// alone, breaking ties by node order as the index does.
func (e *engine) bestAmong(s *Snapshot, req *Request) (*Node, cand, bool) {
	var bestN *Node
	var best cand
	for i, ok := range e.allow {
		if !ok {
			continue
		}
		nd := s.nodes[i]
		c := e.eval(nd, req, -1)
		if c.ok && (bestN == nil || less(&c.cost, &best.cost)) {
			bestN, best = nd, c
		}
	}
	return bestN, best, bestN != nil
}
