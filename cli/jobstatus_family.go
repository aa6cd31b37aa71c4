package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
)

// jobFamily is what Nomad says of a job's parent and children: the
// scheduler's status of a job does not carry them.
type jobFamily struct {
	// kind is kindPeriodic or kindParameterized for a parent, else "".
	kind string
	// parent is a child's parent, dispatched whether it was dispatched
	// from a parameterized parent (placed inside its pool of GPUs).
	parent     string
	dispatched bool
	// children are a parent's children, newest first.
	children []*api.JobListStub
}

// maxChildren is how many children of a parent job status lists.
const maxChildren = 10

// familyOf asks Nomad (as nf say) whether the job is a periodic or
// parameterized parent, and then its children, or a child, when the
// scheduler's status hints at one: a group that is a template or waits,
// or an ID of Nomad's children's form. Nomad not answering leaves it
// empty. A scheduler that says a parent waits "for the next decision"
// (one older than template states) is then not believed: Nomad never
// places such a parent and gpushare never decides it.
func familyOf(nf *nomadFlags, ns string, st service.JobStatus) jobFamily {
	ask := strings.Contains(st.ID, "/dispatch-") || strings.Contains(st.ID, "/periodic-")
	for _, g := range st.Groups {
		ask = ask || g.State == "template" || g.State == "pending"
	}
	if !ask {
		return jobFamily{}
	}
	client, err := nf.client(10 * time.Second)
	if err != nil {
		return jobFamily{}
	}
	q := &api.QueryOptions{Namespace: ns}
	job, _, err := client.Jobs().Info(st.ID, q)
	if err != nil {
		return jobFamily{}
	}
	var f jobFamily
	switch {
	case job.IsPeriodic():
		f.kind = kindPeriodic
	case job.IsParameterized():
		f.kind = kindParameterized
	}
	if job.ParentID != nil && *job.ParentID != "" {
		f.parent = *job.ParentID
		f.dispatched = job.Dispatched
	}
	if f.kind != "" {
		stubs, _, err := client.Jobs().PrefixList(st.ID + "/")
		if err == nil {
			for _, s := range stubs {
				if s.ParentID == st.ID || f.kind == kindPeriodic && s.ParentID == "" && periodicLaunch(st.ID, s.ID) {
					f.children = append(f.children, s)
				}
			}
			slices.SortFunc(f.children, func(a, b *api.JobListStub) int {
				if a.SubmitTime != b.SubmitTime {
					return int(b.SubmitTime - a.SubmitTime)
				}
				return strings.Compare(b.ID, a.ID)
			})
		}
	}
	return f
}

// periodicLaunch reports whether id is the name Nomad gives a child of
// the periodic job parent, "<parent>/periodic-<unix time>". Nomad's HTTP
// API drops a job's ParentID when it is registered again, and gpushare
// registers each periodic child it pins: a placed child has no ParentID.
func periodicLaunch(parent, id string) bool {
	at, ok := strings.CutPrefix(id, parent+"/periodic-")
	return ok && at != "" && strings.Trim(at, "0123456789") == ""
}

// printChildren lists a parent's children with their states, newest
// first, at most maxChildren.
func printChildren(io IO, f jobFamily) {
	if f.kind == "" {
		return
	}
	if len(f.children) == 0 {
		fmt.Fprintln(io.Out, "  children: none in Nomad now (none launched yet, or garbage-collected)")
		return
	}
	shown := f.children
	head := fmt.Sprintf("  children (%d, newest first):", len(shown))
	if len(shown) > maxChildren {
		head = fmt.Sprintf("  children (%d, the %d newest shown):", len(shown), maxChildren)
		shown = shown[:maxChildren]
	}
	fmt.Fprintln(io.Out, head)
	for _, c := range shown {
		fmt.Fprintf(io.Out, "    %s: %s\n", c.ID, childState(c))
	}
	fmt.Fprintf(io.Out, "  (`gpushare job status <child>` says where each runs)\n")
}

// childState is a child's status, and for one that ended how its
// allocations ended (Nomad's job summary).
func childState(c *api.JobListStub) string {
	state := c.Status
	if c.JobSummary == nil {
		return state
	}
	var complete, failed, running, queued int
	for _, s := range c.JobSummary.Summary {
		complete += s.Complete
		failed += s.Failed + s.Lost
		running += s.Running + s.Starting
		queued += s.Queued
	}
	var parts []string
	for _, p := range []struct {
		n    int
		word string
	}{{running, "running"}, {queued, "queued (waits for gpushare)"}, {complete, "complete"}, {failed, "failed"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.word))
		}
	}
	if len(parts) > 0 {
		state += " (allocations: " + strings.Join(parts, ", ") + ")"
	}
	return state
}

// printDispatchedChild says where a child dispatched from a parameterized
// parent runs: inside its parent's pool of GPUs (which the scheduler's
// status gives as its placement), with its own allocations' GPUs and
// shares, not the whole pool as if it were the child's.
func printDispatchedChild(io IO, parent string, g service.GroupStatus, where gpuWhere) {
	p := g.Placement
	fmt.Fprintf(io.Out, "  group %s: %s, inside its parent %s's pool of GPUs (%d node(s), %d GPU(s); `gpushare job status %s` shows the pool)\n",
		g.Name, g.State, parent, len(p.Nodes), len(p.GPUs), parent)
	if len(g.Allocs) == 0 {
		fmt.Fprintln(io.Out, "    no allocation yet: Nomad places it inside the pool when there is room there")
	}
}
