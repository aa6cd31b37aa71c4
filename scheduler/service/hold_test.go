package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The fake Nomad's hold calls: a hold is placed at once on the node its
// meta names, holding the shares its device constraint names (unless
// holdRefused), and stopping it ends its allocation.

func (f *fakeNomad) RegisterHold(_ context.Context, j *api.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holdErr != nil {
		return f.holdErr
	}
	f.holdsRegistered++
	f.putLocked(j)
	if f.holdUnplaced {
		return nil
	}
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + *j.ID, Namespace: nsOf(j), JobID: *j.ID, TaskGroup: "hold", NodeID: j.Meta[metaHoldNode],
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"hold": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: heldShares(j)}}}}}})
	return nil
}

func (f *fakeNomad) JobAllocs(_ context.Context, _, id string) ([]*api.AllocationListStub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.AllocationListStub
	for _, a := range f.allocs {
		if a.JobID == id {
			out = append(out, &api.AllocationListStub{ID: a.ID, JobID: a.JobID, NodeID: a.NodeID, DesiredStatus: a.DesiredStatus, ClientStatus: a.ClientStatus})
		}
	}
	return out, nil
}

func (f *fakeNomad) StopJob(_ context.Context, _, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return errors.New("not found")
	}
	f.holdsStopped = append(f.holdsStopped, id)
	j.Stop = ptr(true)
	f.allocs = slices.DeleteFunc(f.allocs, func(a *api.Allocation) bool { return a.JobID == id })
	return nil
}

// rawExec is a DGX-1 whose client runs raw_exec: holds can run there.
func rawExec(t *testing.T) *api.Node {
	n := dgx1(t)
	n.Drivers = map[string]*api.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}
	return n
}

// liveHolds lists the fake's live hold jobs.
func (f *fakeNomad) liveHolds() []*api.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*api.Job
	for id, j := range f.jobs {
		if isHold(id) && (j.Stop == nil || !*j.Stop) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *api.Job) int { return strings.Compare(*a.ID, *b.ID) })
	return out
}

// byGPU groups shares by GPU UUID.
func byGPU(shares []string) map[string]int {
	out := map[string]int{}
	for _, s := range shares {
		out[s[:strings.LastIndexByte(s, ':')]]++
	}
	return out
}

// staged registers gated job id (count allocations of shares each) on a
// fake Nomad of one DGX-1 that runs raw_exec, lets a loaded service pin
// it, and returns them with its record and the shares no hold holds.
func staged(t *testing.T, id string, shares uint64, count int) (*fakeNomad, *Service, *pin.Record, []string) {
	t.Helper()
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	j := gated(id, shares)
	j.TaskGroups[0].Count = ptr(count)
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs[id], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key(id)]))
	return f, s, rec, notHeld(f, rec)
}

// notHeld are the pinned shares no live hold holds: all Nomad can give.
func notHeld(f *fakeNomad, rec *pin.Record) []string {
	held := map[string]bool{}
	for _, h := range f.liveHolds() {
		for _, sh := range heldShares(h) {
			held[sh] = true
		}
	}
	var out []string
	for _, sh := range rec.Shares {
		if !held[sh] {
			out = append(out, sh)
		}
	}
	return out
}

// Two allocations of one whole GPU each, on the only (8-GPU) node, whose
// client runs raw_exec: the group is pinned to two GPUs, and the second
// GPU is held by a hold job registered (and placed) before the pin, so
// Nomad can give the first allocation only the first GPU. Once it runs
// there the hold is let go, and no hold is left; a group pinned again
// (its job changed) or gone lets its holds go too. Without staging the
// group waited for a second node (TestTwoWholeGPUsOnOneNodeWaitWithTheRule).
func TestWholeGPUsOfAGroupOnOneNodeAreStaged(t *testing.T) {
	f, s, rec, free := staged(t, "two", 100, 2)
	must.MapLen(t, 2, byGPU(rec.Shares))
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	h := holds[0]
	held := heldShares(h)
	must.SliceLen(t, 100, held)
	must.MapLen(t, 1, byGPU(held), must.Sprint("a hold holds one allocation's GPU"))
	must.Eq(t, "node-1", h.Meta[metaHoldNode])
	must.Eq(t, "default/two/g", h.Meta[metaHoldFor])
	must.Eq(t, "raw_exec", h.TaskGroups[0].Tasks[0].Driver)
	must.MapLen(t, 1, byGPU(free))

	// the hold is kept until Nomad has placed the first allocation
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.liveHolds())
	must.StrContains(t, stageOf(s, "two").Why, "staged on node node-1: 1 allocation(s) wait for GPUs held for them by "+*h.ID)
	must.SliceEmpty(t, f.holdsStopped)
	// Nomad placed the first allocation on the GPU not held: let go
	f.runningOn("two", "a1", free)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{*h.ID}, f.holdsStopped)
	must.SliceEmpty(t, f.liveHolds())
	again, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok)
	must.Eq(t, rec.Shares, again.Shares, must.Sprint("not pinned again"))
}

// A batch group is never staged: once one of its allocations ended, its
// shares are free in the pinned set again, so a hold let go after it
// could let Nomad give the next allocation shares of two GPUs (a churn
// run of 10,000 jobs saw it: 25 shares, 11 on one GPU and 14 on another,
// refused by Reserve). On the only node, its fractions stack on one GPU
// without a hold, and two whole GPUs wait for a second node.
func TestABatchGroupIsNeverStaged(t *testing.T) {
	for _, c := range []struct {
		shares uint64
		count  int
	}{{60, 3}, {25, 2}, {100, 2}} {
		f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
		j := gated("b", c.shares)
		j.Type = ptr("batch")
		j.TaskGroups[0].Count = ptr(c.count)
		f.put(j)
		s := loadedService(t, f)
		s.loop.reconcile(t.Context())
		must.SliceEmpty(t, f.liveHolds(), must.Sprintf("%d x %d: no hold for a batch group", c.count, c.shares))
		rec, ok := pin.ParseRecord(f.jobs["b"], "g")
		if c.shares == 25 {
			must.True(t, ok, must.Sprint(s.loop.answers.pending[key("b")]))
			must.MapLen(t, 1, byGPU(rec.Shares), must.Sprint("fractions stacked on one GPU"))
			continue
		}
		must.False(t, ok, must.Sprintf("%d x %d: not pinned on one node", c.count, c.shares))
		if c.shares == 100 {
			must.StrContains(t, s.loop.answers.pending[key("b")], "one whole-GPU allocation of a batch group per node")
		}
	}
}

// While a hold holds a GPU for a group, its shares are the group's: the
// model never sees the hold's allocation (its group would look short and
// be pinned again), and no other group is pinned onto them.
func TestAHoldsSharesStayItsGroups(t *testing.T) {
	f, s, rec, _ := staged(t, "two", 400, 2)
	must.MapLen(t, 8, byGPU(rec.Shares))
	must.SliceLen(t, 1, f.liveHolds())
	f.put(gated("other", 100))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	for id := range s.state.Allocs {
		must.False(t, isHold(s.state.Allocs[id].JobID), must.Sprint("a hold's allocation in the model"))
	}
	s.mu.Unlock()
	version := *f.jobs["two"].Version
	s.loop.reconcile(t.Context())
	must.Eq(t, version, *f.jobs["two"].Version, must.Sprint("pinned again while its hold held its shares"))
	_, ok := pin.ParseRecord(f.jobs["other"], "g")
	must.False(t, ok, must.Sprint("the 8 GPUs are the group's"))
	must.SliceLen(t, 1, f.liveHolds())
}

// A hold Nomad does not place (its CPU, memory or GPUs taken) fails the
// pin: the hold is let go, the group is not pinned and says why; a hold
// whose group is gone is let go at the next pass.
func TestAHoldNotPlacedFailsThePin(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}, holdErr: errors.New("permission denied")}
	j := gated("two", 100)
	j.TaskGroups[0].Count = ptr(2)
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.False(t, ok)
	must.StrContains(t, s.loop.answers.pending[key("two")], "hold GPUs on node node-1")
	must.StrContains(t, s.loop.answers.pending[key("two")], "permission denied")

	// registered, then its group is deregistered: let go
	f2 := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	f2.put(j)
	s2 := loadedService(t, f2)
	s2.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f2.liveHolds())
	f2.mu.Lock()
	delete(f2.jobs, "two")
	f2.mu.Unlock()
	must.NoError(t, s2.watcher.resync(t.Context()))
	s2.loop.reconcile(t.Context())
	must.SliceEmpty(t, f2.liveHolds())
	s2.mu.Lock()
	must.MapEmpty(t, s2.holds)
	_, inModel := s2.state.Jobs[model.JobKey("default", *f2.holdsStoppedJob())]
	s2.mu.Unlock()
	must.False(t, inModel)
}

func (f *fakeNomad) holdsStoppedJob() *string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.holdsStopped) == 0 {
		return ptr("")
	}
	return ptr(f.holdsStopped[0])
}

// A job of the user's that takes the hold prefix, with meta naming a
// group, is not the scheduler's to stop: only signed holds are let go.
func TestAnUnsignedHoldIsNeverStopped(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	forged := gated(HoldPrefix+"mine", 100)
	forged.Meta = map[string]string{metaHoldFor: "default/gone/g", metaHoldNode: "node-1", metaHoldPin: "x"}
	f.put(forged)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, f.holdsStopped)
}

// Fractions of a group that one GPU cannot hold together, on the only
// node: pinned on three GPUs, two of them held; each hold is let go only
// once the allocations before it run, one per pass.
func TestFractionsOnSeveralGPUsOfOneNodeAreStaged(t *testing.T) {
	f, s, rec, first := staged(t, "frac", 60, 3)
	must.MapLen(t, 3, byGPU(rec.Shares))
	must.SliceLen(t, 2, f.liveHolds())
	must.SliceLen(t, 60, first)
	f.runningOn("frac", "a1", first)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.holdsStopped, must.Sprint("one hold at a time"))
	must.SliceLen(t, 1, f.liveHolds())
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.liveHolds(), must.Sprint("the next waits until Nomad placed the one before"))
	released := heldSharesOf(s, f.holdsStopped[0])
	f.runningOn("frac", "a2", released)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, f.liveHolds())
}

// heldSharesOf are the shares hold id held, from the fake.
func heldSharesOf(s *Service, id string) []string {
	f := s.loop.nomad.(*fakeNomad)
	f.mu.Lock()
	defer f.mu.Unlock()
	return heldShares(f.jobs[id])
}

// stagedTwo places job id (two one-GPU allocations on the only node,
// staged) and runs both, as Nomad does; it returns the shares of each.
func stagedTwo(t *testing.T, j *api.Job) (*fakeNomad, *Service, [2][]string) {
	t.Helper()
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	f.put(j)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs[*j.ID], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key(*j.ID)]))
	h := f.liveHolds()
	must.SliceLen(t, 1, h)
	out := [2][]string{notHeld(f, rec), heldShares(h[0])}
	f.runningOn(*j.ID, "a1", out[0])
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	f.runningOn(*j.ID, "a2", out[1])
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, f.liveHolds())
	return f, s, out
}

// A new release of a staged group that Nomad replaces two at a time
// (max_parallel = 2): pinned to the shares the running allocations free,
// both replacements could get half of each GPU; so the new version is
// placed beside them, on GPUs of its own, staged again. With Nomad's
// default max_parallel = 1 it takes the shares it replaces, as before
// (each replacement can only take the GPU its predecessor frees).
func TestAStagedGroupReplacedTwoAtATimeIsPlacedBeside(t *testing.T) {
	for _, parallel := range []int{1, 2} {
		t.Run(fmt.Sprint("max_parallel=", parallel), func(t *testing.T) {
			spec := func(version string) *api.Job {
				j := gated("two", 100)
				j.TaskGroups[0].Count = ptr(2)
				j.Update = &api.UpdateStrategy{MaxParallel: ptr(parallel)}
				j.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": version}
				return j
			}
			f, s, old := stagedTwo(t, spec("1"))
			registered := f.holdsRegistered
			f.put(spec("2"))
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			next, ok := pin.ParseRecord(f.jobs["two"], "g")
			must.True(t, ok, must.Sprint(s.loop.answers.pending[key("two")]))
			oldShares := append(slices.Clone(old[0]), old[1]...)
			if parallel == 1 {
				must.SliceContainsAll(t, oldShares, next.Shares, must.Sprint("replaced one at a time: on the shares it frees"))
				must.Eq(t, registered, f.holdsRegistered)
				return
			}
			for _, sh := range next.Shares {
				must.SliceNotContains(t, oldShares, sh, must.Sprint("replaced together: beside what runs"))
			}
			must.MapLen(t, 2, byGPU(next.Shares))
			must.SliceLen(t, 1, f.liveHolds(), must.Sprint("staged again"))
		})
	}
}

// A scheduler that starts while a group is staged (the last one stopped
// or lost its lease) finds the holds in Nomad's listing and finishes the
// staging: the hold is let go once Nomad placed the allocation before.
func TestANewSchedulerFinishesTheStaging(t *testing.T) {
	f, _, _, free := staged(t, "two", 100, 2)
	h := f.liveHolds()
	must.SliceLen(t, 1, h)
	f.runningOn("two", "a1", free)

	next := loadedService(t, f)
	next.mu.Lock()
	must.MapLen(t, 1, next.holds)
	next.mu.Unlock()
	next.loop.reconcile(t.Context())
	must.Eq(t, []string{*h[0].ID}, f.holdsStopped)
}

// A staged group whose job changes before Nomad placed it is pinned
// again, staged again: the older pin's hold is let go before the newer's
// is registered (it may need the same shares), and the newer is kept.
func TestAStaleHoldIsLetGoAndTheNewKept(t *testing.T) {
	f, s, _, _ := staged(t, "two", 100, 2)
	old := f.liveHolds()
	must.SliceLen(t, 1, old)
	changed := gated("two", 100)
	changed.TaskGroups[0].Count = ptr(2)
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"APP_VERSION": "2"}
	f.put(changed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("two")]))
	must.Eq(t, []string{*old[0].ID}, f.holdsStopped, must.Sprint("the older pin's hold let go"))
	must.SliceLen(t, 1, f.liveHolds(), must.Sprint("the newer pin's hold (the same ID when it holds the same shares)"))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.liveHolds(), must.Sprint("the newer pin's hold kept until its first allocation runs"))
}
