package webui

import (
	"fmt"
	"strings"
)

// Family is what a job's page says of its parent and its children: a
// child dispatched from a parameterized job runs inside its parent's pool
// of GPUs, which is the pin it carries, so its page shows where its own
// allocations run (JobGroup.Own) and names the pool as its parent's, not
// as its own placement; a periodic or parameterized parent lists its
// children, each linked to its page.
type Family struct {
	// Parent is the job that launched or dispatched this one ("" for a
	// job that is no child); Dispatched says it was dispatched from a
	// parameterized parent, into its pool.
	Parent     string
	Dispatched bool
	// Kind is "periodic" or "parameterized" for a parent, else "".
	Kind string
	// Children are a parent's children, newest first, at most the page's
	// limit; ChildCount how many Nomad has.
	Children   []Child
	ChildCount int
}

// Child is one child of a parent job.
type Child struct {
	ID string
	// Status is Nomad's job status (pending, running, dead).
	Status string
	// Its allocations: running (or starting), pending, complete, failed
	// (or lost).
	Running, Pending, Complete, Failed int
	// Waits is why gpushare has not placed a group of it yet ("" when it
	// waits for nothing).
	Waits string
}

// Allocs says how the child's allocations stand, "" with none.
func (c Child) Allocs() string {
	var parts []string
	for _, p := range []struct {
		n    int
		word string
	}{{c.Running, "running"}, {c.Pending, "pending"}, {c.Complete, "complete"}, {c.Failed, "failed"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.word))
		}
	}
	return strings.Join(parts, ", ")
}

// AllocPlace is where one allocation of a dispatched child runs (or ran):
// its node and the shares it holds on each GPU, and its client status.
type AllocPlace struct {
	ID     string
	Node   string
	GPUs   []GPUShares
	Status string
}

// GPUShares is how many shares of one GPU (or MIG instance) an allocation
// holds.
type GPUShares struct {
	UUID   string
	Shares int
}

// GPUOn names GPU uuid on node: its index alone ("GPU 2") when the map
// names it on that node, else GPUName's.
func (j Job) GPUOn(uuid, node string) string {
	return strings.TrimSuffix(j.GPUName(uuid), " on "+node)
}
