package feasible

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// Cache keeps each group's compiled rules for the version of its job they
// were compiled from (the job's JobModifyIndex, else its ModifyIndex), so
// that a pass over hundreds of groups compiles only what changed.
type Cache struct {
	mu   sync.Mutex
	m    map[cacheKey]*cached
	pass uint64
}

type cacheKey struct{ namespace, job, group string }

type cached struct {
	index uint64
	rules *Rules
	err   error
	seen  uint64 // the pass it was last asked for
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[cacheKey]*cached{}} }

// Rules returns group's rules for this version of job, compiled on first
// use. skip must decide on the job version alone (it is applied once).
func (c *Cache) Rules(job *api.Job, group string, skip Skip) (*Rules, error) {
	k := cacheKey{deref(job.Namespace), deref(job.ID), group}
	idx := uint64(0)
	switch {
	case job.JobModifyIndex != nil:
		idx = *job.JobModifyIndex
	case job.ModifyIndex != nil:
		idx = *job.ModifyIndex
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && e.index == idx && idx != 0 {
		e.seen = c.pass
		return e.rules, e.err
	}
	r, err := Compile(job, group, skip)
	c.m[k] = &cached{index: idx, rules: r, err: err, seen: c.pass}
	return r, err
}

// Sweep forgets the rules not asked for since the last Sweep (groups whose
// job is gone or no longer needs deciding).
func (c *Cache) Sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.seen != c.pass {
			delete(c.m, k)
		}
	}
	c.pass++
}

// Len is the number of groups cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Tally counts the nodes filtered, by reason, as Nomad's allocation
// metrics do (NodesFiltered, ConstraintFiltered).
type Tally struct {
	Filtered int
	by       map[string]int
}

// Add counts one node filtered for reason (nothing for "").
func (t *Tally) Add(reason string) {
	if reason == "" {
		return
	}
	if t.by == nil {
		t.by = map[string]int{}
	}
	t.Filtered++
	t.by[reason]++
}

// Count is the number of nodes filtered for reason.
func (t *Tally) Count(reason string) int { return t.by[reason] }

// String says what filtered the nodes, most first: "3 nodes filtered:
// missing compatible datacenter (2), constraint ${attr.kernel.name} = plan9 (1)".
func (t *Tally) String() string {
	if t.Filtered == 0 {
		return "no node filtered"
	}
	reasons := slices.SortedFunc(maps.Keys(t.by), func(a, b string) int {
		if c := cmp.Compare(t.by[b], t.by[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s (%d)", r, t.by[r])
	}
	noun := "nodes"
	if t.Filtered == 1 {
		noun = "node"
	}
	return fmt.Sprintf("%d %s filtered: %s", t.Filtered, noun, strings.Join(parts, ", "))
}
