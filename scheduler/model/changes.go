package model

// changes are what the state saw change since the last Snapshot: the
// nodes, allocations and jobs put or deleted (by ID and job key), which
// are all Snapshot looks at again (incremental.go; a learned profile
// marks its group's job). all asks it to look at everything: what every
// allocation's group facts are read from changed (the trust in pin
// records, a learned profile of a key that names no group).
type changes struct {
	nodes  map[string]bool
	allocs map[string]bool
	jobs   map[string]bool
	all    bool
	// seen keeps what take returned for TakeTouched (generation.go).
	seen touched
}

func (c *changes) node(id string) { c.nodes = mark(c.nodes, id) }

func (c *changes) alloc(id string) { c.allocs = mark(c.allocs, id) }

func (c *changes) job(key string) { c.jobs = mark(c.jobs, key) }

// take returns what changed and starts afresh.
func (c *changes) take() changes {
	out := *c
	c.seen.add(out)
	*c = changes{seen: c.seen}
	return out
}

func mark(set map[string]bool, id string) map[string]bool {
	if set == nil {
		set = map[string]bool{}
	}
	set[id] = true
	return set
}
