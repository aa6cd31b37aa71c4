package service

import (
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// failAlloc marks allocation id failed, its task finished at t, after the
// reschedules of attempts (none: it never was one), as Nomad reports it.
func (f *fakeNomad) failAlloc(id string, t time.Time, attempts ...time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for _, a := range f.allocs {
		if a.ID != id {
			continue
		}
		a.ClientStatus, a.ModifyIndex, a.ModifyTime = "failed", f.index, t.UnixNano()
		a.TaskStates = map[string]*api.TaskState{"t": {State: "dead", Failed: true, StartedAt: t.Add(-time.Minute), FinishedAt: t}}
		if attempts != nil {
			a.RescheduleTracker = &api.RescheduleTracker{LastReschedule: "ok"}
			for _, at := range attempts {
				a.RescheduleTracker.Events = append(a.RescheduleTracker.Events, &api.RescheduleEvent{RescheduleTime: at.UnixNano(), PrevAllocID: "before-" + id})
			}
		}
	}
}

// batchOfTwo is batch job etl, count 2, a quarter GPU each, placed on two
// DGX-1s: alloc-a and alloc-b run on their pinned shares, each with the
// version it runs (as Nomad returns it), and alloc-a completed unless it
// is to fail.
func batchOfTwo(t *testing.T, aFails bool) (*fakeNomad, *Service, *pin.Record, map[string][]string) {
	j := gated("etl", 25)
	j.Type = ptr("batch")
	j.TaskGroups[0].Count = ptr(2)
	f, s, rec := placedFirst(t, j, twoDGX1(t)...)
	must.Len(t, 50, rec.Shares)
	of := map[string][]string{} // the shares each allocation runs on
	at := map[string]string{}   // its node
	ids := []string{"alloc-a", "alloc-b"}
	for _, n := range rec.Nodes {
		on := sharesOn(t, f, rec, n)
		for len(on) >= 25 && len(of) < 2 {
			id := ids[len(of)]
			of[id], at[id], on = on[:25], n, on[25:]
		}
	}
	must.MapLen(t, 2, of)
	ran, err := copyJob(f.jobs["etl"])
	must.NoError(t, err)
	for _, id := range ids {
		f.setAlloc("etl", id, at[id], of[id], "running", "run")
	}
	f.mu.Lock()
	for _, a := range f.allocs {
		a.Job = ran
	}
	f.mu.Unlock()
	if !aFails {
		f.setAlloc("etl", "alloc-a", "", nil, "complete", "run")
	}
	onePass(t, s)
	must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
	return f, s, rec, of
}

func onePass(t *testing.T, s *Service) {
	t.Helper()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
}

// pinHeld are the shares the model holds for job etl's missing allocations.
func pinHeld(s *Service) []string {
	var out []string
	for _, shares := range heldFor(s, key("etl")) {
		out = append(out, shares...)
	}
	slices.Sort(out)
	return out
}

// A batch group of count 2 one of whose allocations completed and the
// other failed. With its reschedule attempts used up (it was itself the
// reschedule of one that failed an hour before, and a batch job's default
// policy allows one in 24h), Nomad counts the failed one among the count
// and places nothing more: the group is done, says how its allocations
// ended, and holds nothing. Before, it was missing: its pinned shares were
// held for ever and the group stayed pinned-unplaced. With an attempt left
// Nomad reschedules it (after its delay): it stays pinned, its shares held.
func TestABatchAllocationFailedForGoodIsOneOfItsCount(t *testing.T) {
	failed := time.Unix(900, 0).UTC() // before the service's clock (1000 s): Nomad's delay passed or not, the same

	t.Run("attempts used up: done, shares released", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, false)
		registers := f.registers
		f.failAlloc("alloc-b", failed, failed.Add(-time.Hour))
		onePass(t, s)
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.StrContains(t, st.Why, "1 completed and 1 failed with no reschedule left")
		must.SliceEmpty(t, pinHeld(s), must.Sprint("nothing of it is missing: it holds no share"))
		must.Eq(t, registers, f.registers, must.Sprint("not pinned again"))
	})

	t.Run("an attempt left: still pinned, its shares held", func(t *testing.T) {
		f, s, rec, of := batchOfTwo(t, false)
		registers := f.registers
		f.failAlloc("alloc-b", failed)
		onePass(t, s)
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.PinnedUnplaced, st.State, must.Sprint(st.Why))
		must.Eq(t, 1, st.Missing, must.Sprint("Nomad reschedules it"))
		must.Len(t, 25, pinHeld(s), must.Sprint("one allocation's worth of its pinned shares stays held"))
		for _, sh := range pinHeld(s) {
			must.SliceContains(t, rec.Shares, sh)
		}
		must.Eq(t, registers, f.registers)

		// its reschedule fails too, and with it the last attempt: done
		f.mu.Lock()
		f.index++
		for _, a := range f.allocs {
			if a.ID == "alloc-b" {
				a.NextAllocation, a.ModifyIndex = "alloc-c", f.index
			}
		}
		f.mu.Unlock()
		f.setAlloc("etl", "alloc-c", "", of["alloc-b"], "running", "run")
		f.mu.Lock()
		f.allocs[len(f.allocs)-1].Job = f.allocs[0].Job
		f.mu.Unlock()
		onePass(t, s)
		must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
		f.failAlloc("alloc-c", failed.Add(time.Minute), failed.Add(10*time.Second))
		onePass(t, s)
		st = stageOf(s, "etl")
		must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.SliceEmpty(t, pinHeld(s))
	})
}

// The same batch jobspec applied again after its run: left at the gate
// (Nomad alone would run nothing) only when the run ended as Nomad counts
// it — every allocation completed or failed with no reschedule left, all
// of them failed so included. One failed with an attempt left is a run
// Nomad alone goes on with (it reschedules it): not a run that completed,
// as it was taken to be when only its last completed allocation was read.
func TestBatchRegisteredAgainAfterFailuresRunsOnlyIfNomadWould(t *testing.T) {
	failed := time.Unix(900, 0).UTC()
	again := func(t *testing.T, f *fakeNomad, s *Service) lifecycle.Result {
		j := gated("etl", 25)
		j.Type = ptr("batch")
		j.TaskGroups[0].Count = ptr(2)
		f.put(j) // the same file, again
		onePass(t, s)
		return stageOf(s, "etl")
	}

	t.Run("one completed, one failed for good: not run again", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, false)
		f.failAlloc("alloc-b", failed, failed.Add(-time.Hour))
		onePass(t, s)
		registers := f.registers
		st := again(t, f, s)
		must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.StrContains(t, st.Why, "registered again unchanged after its run ended")
		must.Eq(t, registers, f.registers)
	})

	t.Run("both failed for good: not run again", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, true)
		f.failAlloc("alloc-a", failed, failed.Add(-time.Hour))
		f.failAlloc("alloc-b", failed, failed.Add(-time.Hour))
		onePass(t, s)
		must.Eq(t, lifecycle.Done, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
		registers := f.registers
		st := again(t, f, s)
		must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.Eq(t, registers, f.registers)
	})

	t.Run("one failed with an attempt left: run again", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, false)
		f.failAlloc("alloc-b", failed)
		onePass(t, s)
		registers := f.registers
		st := again(t, f, s)
		must.NotEq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.Greater(t, registers, f.registers, must.Sprint("pinned again: ", st.Why))
		_, ok := pin.ParseRecord(f.jobs["etl"], "g")
		must.True(t, ok)
	})
}
