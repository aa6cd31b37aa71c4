package service

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A pipeline applies the same batch jobspec again after the job's run
// completed: Nomad alone makes no new version of an unchanged job and runs
// nothing. The gated file is a new version to Nomad (it differs from the
// pinned one by the pin), and pinned as before it would run again (Nomad
// ignores completed allocations of older versions of a batch job): it is
// left at the gate, done, saying why. Changed, it runs again.
func TestBatchRegisteredAgainUnchangedIsNotRunAgain(t *testing.T) {
	batch := func() *api.Job { j := gated("etl", 25); j.Type = ptr("batch"); return j }
	f, s, rec := placedFirst(t, batch())
	f.runningOn("etl", "alloc-1", rec.Shares)
	f.mu.Lock()
	f.index++
	f.allocs[0].ClientStatus, f.allocs[0].ModifyIndex = "complete", f.index
	ran, err := copyJob(f.jobs["etl"]) // the version it ran, as Nomad returns it with the allocation
	must.NoError(t, err)
	f.allocs[0].Job = ran
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Done, stageOf(s, "etl").State)

	registers := f.registers
	f.put(batch()) // the same file, again
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	st := stageOf(s, "etl")
	must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
	must.StrContains(t, st.Why, "registered again unchanged")
	must.Eq(t, registers, f.registers, must.Sprint("nothing pinned: it would run again"))
	must.SliceNotEmpty(t, pin.Gated(f.jobs["etl"]))

	// a scheduler that starts now reads the pin the run was placed with
	// before it decides
	next := loadedService(t, f)
	next.loop.reconcile(t.Context())
	next.loop.readPriors(t.Context())
	next.loop.reconcile(t.Context())
	must.Eq(t, lifecycle.Done, stageOf(next, "etl").State, must.Sprint(stageOf(next, "etl").Why))
	must.Eq(t, registers, f.registers)

	changed := batch()
	changed.TaskGroups[0].Tasks[0].Env = map[string]string{"INPUT": "day-2"}
	f.put(changed)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["etl"], "g")
	must.True(t, ok, must.Sprint("changed, it runs again: ", stageOf(s, "etl").Why))
}
