package placement

// spread is what the allocations of one group placed so far in a decision
// leave to the next: how many each node holds (Nomad's job anti-affinity
// spreads them over nodes) and how many each distinct_property value still
// takes (Request.Limits).
type spread struct {
	r    *Request
	node map[int]int      // allocations placed on each node (by index)
	took []map[string]int // per limit, allocations placed on each value
}

func newSpread(r *Request) *spread {
	sp := &spread{r: r, node: map[int]int{}}
	if len(r.Limits) > 0 {
		sp.took = make([]map[string]int, len(r.Limits))
		for i := range sp.took {
			sp.took[i] = map[string]int{}
		}
	}
	return sp
}

// allows reports whether node n may take one more allocation under every
// limit: a node without a value of the property takes none (Nomad:
// "missing property").
func (sp *spread) allows(n *Node) bool {
	if sp == nil {
		return true
	}
	for i := range sp.r.Limits {
		l := &sp.r.Limits[i]
		v, ok := l.Of[n.ID]
		if !ok || sp.took[i][v] >= l.left(v) {
			return false
		}
	}
	return true
}

// on is how many of the group's allocations node n holds, as far as
// spreading goes (those placed so far and those already there,
// Request.Already): 0 for every node of a request that packs.
func (sp *spread) on(n *Node) int {
	if sp == nil || sp.r.Pack {
		return 0
	}
	return sp.node[n.idx] + sp.r.Already[n.ID]
}

// take counts one more allocation on node n.
func (sp *spread) take(n *Node) {
	sp.node[n.idx]++
	for i := range sp.r.Limits {
		if v, ok := sp.r.Limits[i].Of[n.ID]; ok {
			sp.took[i][v]++
		}
	}
}
