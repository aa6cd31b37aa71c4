package service

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The lifecycles of a placed job in Nomad, against the fake Nomad: each
// test fails without the part of the reconciler it names.

// scaled is job id as `nomad job scale` registers it: the version Nomad
// holds (pin and all) with another count.
func (f *fakeNomad) scaled(t *testing.T, id string, count int) {
	t.Helper()
	f.mu.Lock()
	j, err := copyJob(f.jobs[id])
	f.mu.Unlock()
	must.NoError(t, err)
	j.TaskGroups[0].Count = ptr(count)
	f.put(j)
}

// placedFirst registers j (gated) on a fake Nomad of nodes (one DGX-1 if
// none), lets a loaded service pin it, and returns them with its record.
func placedFirst(t *testing.T, j *api.Job, nodes ...*api.Node) (*fakeNomad, *Service, *pin.Record) {
	t.Helper()
	if len(nodes) == 0 {
		nodes = []*api.Node{dgx1(t)}
	}
	f := &fakeNomad{nodes: nodes, jobs: map[string]*api.Job{}}
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs[*j.ID], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key(*j.ID)]))
	return f, s, rec
}

// twoDGX1 are two DGX-1 nodes of dc1, node-1 and node-2, whose GPU UUIDs
// differ.
func twoDGX1(t *testing.T) []*api.Node {
	return []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1")}
}

// stageOf is where the last pass found job id's group g.
func stageOf(s *Service, id string) lifecycle.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loop.answers.stages[key(id)]
}

// Scaled past its pin (nomad job scale, the Autoscaler), a group is pinned
// again for its new count, keeping the shares its allocation holds, and
// the restart this costs is counted and said; scaled down and back up
// within its pin, it is left to Nomad. Before the reconciler, the scaled
// group's pin was no longer trusted and its new allocations never ran.
func TestScaleUpPastThePinIsPinnedAgain(t *testing.T) {
	f, s, rec := placedFirst(t, gated("web", 25))
	must.Eq(t, 1, rec.Count)
	f.runningOn("web", "alloc-1", rec.Shares)

	f.scaled(t, "web", 3)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	st := stageOf(s, "web")
	must.Eq(t, lifecycle.Scaling, st.State, must.Sprint(st.Why))
	grown, ok := s.state.Record(f.jobs["web"], "g")
	must.True(t, ok, must.Sprint("the new pin is trusted"))
	must.Eq(t, 3, grown.Count)
	must.Len(t, 75, grown.Shares)
	for _, sh := range rec.Shares {
		must.SliceContains(t, grown.Shares, sh, must.Sprint("the running allocation's shares stay in the pin"))
	}
	must.Eq(t, 1.0, counterValue(t, s, `gpushare_restarts_total{reason="scale"}`))

	// down to one, then back to two: within the pin, nothing to do
	registers := f.registers
	f.scaled(t, "web", 1)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Running, stageOf(s, "web").State)
	f.scaled(t, "web", 2)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.PinnedUnplaced, stageOf(s, "web").State, must.Sprint(stageOf(s, "web").Why))
	must.Eq(t, registers, f.registers, must.Sprint("no pin written within the pin's room"))
}

// withCanary is gated with an update block of one canary.
func withCanary(id string, shares uint64) *api.Job {
	j := gated(id, shares)
	j.Update = &api.UpdateStrategy{Canary: ptr(1), MaxParallel: ptr(1)}
	return j
}

// A changed version of a group with canaries is placed beside its running
// allocation, which keeps its shares until the deployment is promoted:
// pinned onto the old allocation's shares (as a rolling update is, or
// kept as it was when only the task's env changed), the canary could never
// be placed and the deployment hung. Registered again
// unchanged, it keeps its pin byte for byte (no canary: Nomad updates in
// place).
func TestCanaryIsPlacedBesideTheRunningAllocation(t *testing.T) {
	f, s, rec := placedFirst(t, withCanary("api", 25))
	first := pinOf(t, f.jobs["api"])
	f.runningOn("api", "alloc-v1", rec.Shares)

	f.put(withCanary("api", 25)) // the same file again
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, first, pinOf(t, f.jobs["api"]))

	// a new release: the same request (the placement would be kept), a
	// change Nomad replaces allocations for
	changed := withCanary("api", 25)
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": "2"}
	f.put(changed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Canarying, stageOf(s, "api").State)
	next, ok := pin.ParseRecord(f.jobs["api"], "g")
	must.True(t, ok)
	must.SliceEmpty(t, pin.Gated(f.jobs["api"]))
	for _, sh := range next.Shares {
		must.SliceNotContains(t, rec.Shares, sh, must.Sprint("a canary takes none of the running allocation's shares"))
	}

	// without canaries, a changed version takes its old allocation's shares
	rolling := gated("roll", 25)
	f.put(rolling)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	old, _ := pin.ParseRecord(f.jobs["roll"], "g")
	f.runningOn("roll", "alloc-r1", old.Shares)
	rolling = gated("roll", 25)
	rolling.TaskGroups[0].Tasks[0].Resources.MemoryMB = ptr(256)
	f.put(rolling)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, _ := pin.ParseRecord(f.jobs["roll"], "g")
	must.Eq(t, old.Shares, again.Shares)
}

// dispatch is a child of parameterized job parent as `nomad job dispatch`
// makes it: the parent's version Nomad holds, with its ParameterizedJob
// block kept, Dispatched and ParentID set.
func (f *fakeNomad) dispatch(t *testing.T, parent, id string) *api.Job {
	t.Helper()
	f.mu.Lock()
	child, err := copyJob(f.jobs[parent])
	f.mu.Unlock()
	must.NoError(t, err)
	child.ID, child.Name, child.ParentID, child.Dispatched = ptr(id), ptr(id), ptr(parent), true
	child.CreateIndex = nil
	f.put(child)
	return child
}

// A gated parameterized job is pinned to a pool: on each node its rules
// allow, all the shares of the one GPU a child's request fits on, so that
// every child Nomad places inside it (a dispatched child keeps its
// parent's constraints, and Nomad refuses every registration of one) is
// on one GPU. Its children are trusted as pinned by their parent, never
// registered, hold nothing, and say why they wait. Before, a child of a
// gated parent waited at the gate for ever (it cannot be pinned), and so
// did every child.
func TestParameterizedParentIsPinnedToAPool(t *testing.T) {
	parent := gated("infer", 25)
	parent.Type = ptr("batch")
	parent.ParameterizedJob = &api.ParameterizedJobConfig{Payload: "optional"}
	f, s, rec := placedFirst(t, parent, twoDGX1(t)...)
	must.Eq(t, []string{"node-1", "node-2"}, rec.Nodes, must.Sprint("one GPU per node the job's rules allow"))
	must.Len(t, 2, rec.GPUs)
	must.Len(t, 200, rec.Shares, must.Sprint("all the shares of one GPU per node: any 25 Nomad takes are on one GPU"))
	must.Eq(t, lifecycle.Template, stageOf(s, "infer").State)
	must.Eq(t, lifecycle.Pool, stageOf(s, "infer").Do)
	st, ok := s.view.jobStatus("default", "infer", "default")
	must.True(t, ok)
	must.Eq(t, "template", st.Groups[0].State)
	must.NotNil(t, st.Groups[0].Placement)
	must.StrContains(t, st.Groups[0].Reason, "pool")

	registers := f.registers
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, registers, f.registers, must.Sprint("a pinned parent is left alone"))
	must.Eq(t, lifecycle.Nothing, stageOf(s, "infer").Do)

	// five children: Nomad places four on node-1's pool GPU and one on
	// node-2's; none is registered, and none holds shares it does not use
	var children []string
	for i := range 5 {
		children = append(children, *f.dispatch(t, "infer", fmt.Sprintf("infer/dispatch-1764000000-%08d", i)).ID)
	}
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, registers, f.registers, must.Sprint("no child is ever registered"))
	for _, c := range children {
		must.Eq(t, lifecycle.PinnedUnplaced, stageOf(s, c).State, must.Sprint(stageOf(s, c).Why))
		must.StrContains(t, s.loop.answers.pending[key(c)], "inside its parent's pool")
	}
	must.Eq(t, 0, len(s.state.Snapshot(nil, nil).HeldFor), must.Sprint("children hold nothing"))
	for i, c := range children[:4] {
		f.runningOn(c, fmt.Sprintf("child-%d", i), rec.Shares[i*25:(i+1)*25])
	}
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Running, stageOf(s, children[0]).State, must.Sprint(stageOf(s, children[0]).Why))
	must.MapNotContainsKey(t, s.loop.answers.pending, key(children[0]))
	must.Eq(t, lifecycle.PinnedUnplaced, stageOf(s, children[4]).State)
	must.Eq(t, registers, f.registers)

	// a pipeline registers the parent again from its file (gated): a new pool
	f.put(gatedParam("infer"))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, ok := pin.ParseRecord(f.jobs["infer"], "g")
	must.True(t, ok)
	must.Eq(t, []string{"node-1", "node-2"}, again.Nodes)
	must.SliceNotContains(t, again.GPUs, rec.GPUs[0], must.Sprint("node-1's pool GPU is full now: another GPU"))
}

func gatedParam(id string) *api.Job {
	j := gated(id, 25)
	j.Type = ptr("batch")
	j.ParameterizedJob = &api.ParameterizedJobConfig{Payload: "optional"}
	return j
}

// A child dispatched while its parent still waited at the gate (no
// scheduler ran) carries the gate, and Nomad refuses to register it
// again: it waits, says why and what to do, and no pin is attempted (each
// failed, and was retried for ever).
func TestDispatchedChildOfAGatedParentSaysWhy(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	child := gatedParam("infer/dispatch-1764000000-0a1b2c3d")
	child.ParentID, child.Dispatched = ptr("infer"), true
	f.put(child)
	s := loadedService(t, f)
	registers := f.registers
	s.loop.reconcile(t.Context())
	must.Eq(t, registers, f.registers, must.Sprint("no pin attempted"))
	must.StrContains(t, s.loop.answers.pending[key(*child.ID)], "dispatch it again")
	must.Eq(t, lifecycle.Waiting, stageOf(s, *child.ID).State)
	st, ok := s.view.jobStatus("default", *child.ID, "default")
	must.True(t, ok)
	must.Eq(t, "pending", st.Groups[0].State)
}

// A batch job that completed, run again under the same ID, and whose new
// allocation is then lost with its node, is placed again on another node:
// the completion of the earlier version does not make the group look
// finished (Nomad's reconciler ignores terminal allocations of older
// versions).
func TestBatchRunAgainIsRepinnedWhenItsNodeIsLost(t *testing.T) {
	batch := func() *api.Job { j := gated("etl", 25); j.Type = ptr("batch"); return j }
	f, s, rec := placedFirst(t, batch(), twoDGX1(t)...)
	f.runningOn("etl", "alloc-1", rec.Shares)
	f.mu.Lock()
	f.index++
	f.allocs[0].ClientStatus, f.allocs[0].ModifyIndex = "complete", f.index
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Done, stageOf(s, "etl").State)

	again := batch() // run again, with a new input (unchanged, it is not: TestBatchRegisteredAgainUnchangedIsNotRunAgain)
	again.TaskGroups[0].Tasks[0].Env = map[string]string{"INPUT": "day-2"}
	f.put(again)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rerun, ok := pin.ParseRecord(f.jobs["etl"], "g")
	must.True(t, ok)
	must.SliceEmpty(t, pin.Gated(f.jobs["etl"]))
	node := rerun.Nodes[0]
	f.runningOn("etl", "alloc-2", rerun.Shares)
	f.mu.Lock()
	f.index++
	for _, a := range f.allocs {
		if a.ID == "alloc-2" {
			a.NodeID, a.ClientStatus, a.ModifyIndex = node, "lost", f.index
		}
	}
	for _, n := range f.nodes {
		if n.ID == node {
			n.Status = "down"
		}
	}
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Migrating, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
	moved, ok := pin.ParseRecord(f.jobs["etl"], "g")
	must.True(t, ok)
	must.False(t, slices.Contains(moved.Nodes, node), must.Sprintf("pinned again off the lost node: %v", moved.Nodes))
}

// A new version pinned beside the shares its old allocation holds (the
// request grew on the same GPU) keeps its new shares held until Nomad
// replaces the old allocation: another group decided meanwhile is not
// given them (it was: the old allocation counted as the group's, so
// nothing was missing and nothing held).
func TestNewVersionsSharesAreHeldUntilReplaced(t *testing.T) {
	f, s, old := placedFirst(t, gated("q", 25))
	f.runningOn("q", "alloc-q", old.Shares)
	f.put(gated("q", 50))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	grown, ok := pin.ParseRecord(f.jobs["q"], "g")
	must.True(t, ok)
	must.Len(t, 50, grown.Shares)

	// a 75-share group: the old allocation's GPU has exactly 75 shares no
	// allocation holds, the best fit, were the new pin's not held
	f.put(gated("other", 75))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	other, ok := pin.ParseRecord(f.jobs["other"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("other")]))
	for _, sh := range other.Shares {
		must.SliceNotContains(t, grown.Shares, sh, must.Sprint("given a share q's new version is pinned to"))
	}
}

// A group registered again unchanged while its node is ineligible (or
// draining) keeps its pin byte for byte, so Nomad updates it in place
// there, as it would without gpushare: the placement core leaves such
// nodes out, and the group was pinned onto another node (a restart).
func TestUnchangedOnAnIneligibleNodeKeepsItsPin(t *testing.T) {
	f, s, rec := placedFirst(t, gated("q", 25), twoDGX1(t)...)
	first := pinOf(t, f.jobs["q"])
	must.Eq(t, []string{"node-1"}, rec.Nodes)
	f.runningOn("q", "alloc-q", rec.Shares)
	f.mu.Lock()
	f.index++
	f.nodes[0].SchedulingEligibility, f.nodes[0].ModifyIndex = "ineligible", f.index
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))

	f.put(gated("q", 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["q"]), must.Sprint(s.loop.answers.pending[key("q")]))
	must.Eq(t, first, pinOf(t, f.jobs["q"]))
	must.EqOp(t, 0.0, restartsCounted(t, s)) // every reason a series, at 0
}

// A follower shows a group the leader refused for good as refused, not as
// pending, from the leader's records; and no longer once the leader's
// records stop saying so.
func TestFollowerShowsRefusedGroupsAsRefused(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("huge", 900)) // nine GPUs: no node of this cluster has them
	leader := loadedService(t, f)
	leader.loop.reconcile(t.Context())
	must.MapContainsKey(t, leader.loop.refusals.forGood, key("huge"))
	follower := loadedService(t, f)
	st, ok := follower.view.jobStatus("default", "huge", "default")
	must.True(t, ok)
	must.Eq(t, "refused", st.Groups[0].State, must.Sprint(st.Groups[0].Reason))

	leader.mu.Lock()
	delete(leader.loop.refusals.forGood, key("huge"))
	leader.records.reasonsSaved = time.Time{}
	leader.mu.Unlock()
	leader.records.saveState(t.Context())
	must.NoError(t, follower.records.loadState(t.Context(), true))
	st, _ = follower.view.jobStatus("default", "huge", "default")
	must.Eq(t, "pending", st.Groups[0].State)
}

// With distinct_hosts at job level, two groups of one job decided in the
// same pass, or one after the other was pinned but before its allocation
// exists, never share a node (they were both packed onto one: Nomad placed
// one, and the retry restarted it).
func TestJobDistinctHostsKeepsGroupsApart(t *testing.T) {
	for _, together := range []bool{true, false} {
		two := func() *api.Job {
			j := gated("pair", 25)
			h := *j.TaskGroups[0]
			h.Name = ptr("h")
			j.TaskGroups = append(j.TaskGroups, &h)
			j.Constraints = append(j.Constraints, &api.Constraint{Operand: "distinct_hosts", RTarget: "true"})
			return j
		}
		f := &fakeNomad{nodes: twoDGX1(t), jobs: map[string]*api.Job{}}
		j := two()
		if !together { // h first, g later
			j.TaskGroups[0].Constraints = nil
			j.TaskGroups = j.TaskGroups[1:]
		}
		f.put(j)
		s := loadedService(t, f)
		s.loop.reconcile(t.Context())
		if !together {
			f.mu.Lock()
			later, err := copyJob(f.jobs["pair"])
			f.mu.Unlock()
			must.NoError(t, err)
			g := two().TaskGroups[0]
			later.TaskGroups = append([]*api.TaskGroup{g}, later.TaskGroups...)
			f.put(later)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
		}
		g, okG := pin.ParseRecord(f.jobs["pair"], "g")
		h, okH := pin.ParseRecord(f.jobs["pair"], "h")
		must.True(t, okG && okH, must.Sprintf("together=%v: %v", together, s.loop.answers.pending))
		must.NotEq(t, g.Nodes, h.Nodes, must.Sprintf("together=%v", together))
	}
}

// A parameterized job no node can hold one child of is not pinned to an
// empty pool: it stays at the gate, nothing is registered, and it says why.
func TestParameterizedParentWithoutAPoolSaysWhy(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	parent := gatedParam("huge")
	parent.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptr(uint64(1600)) // 16 GPUs; the node has 8
	f.put(parent)
	s := loadedService(t, f)
	registers := f.registers
	s.loop.reconcile(t.Context())
	must.Eq(t, registers, f.registers, must.Sprint("nothing registered"))
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["huge"]))
	must.StrContains(t, s.loop.answers.pending[key("huge")], "no pool of GPUs for its dispatched children")
	st, ok := s.view.jobStatus("default", "huge", "default")
	must.True(t, ok)
	must.Eq(t, "pending", st.Groups[0].State)
}
