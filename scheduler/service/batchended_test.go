package service

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// name gives allocation id of job etl's group g the name Nomad gives the
// index-th allocation.
func (f *fakeNomad) name(id string, index int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for _, a := range f.allocs {
		if a.ID == id {
			a.Name, a.ModifyIndex = fmt.Sprintf("%s.g[%d]", a.JobID, index), f.index
		}
	}
}

// updatedInPlace is Nomad updating job id's allocation alloc to the job's
// current version in place (the pin written back unchanged).
func (f *fakeNomad) updatedInPlace(t *testing.T, id, alloc string) {
	t.Helper()
	j, err := copyJob(f.jobs[id])
	must.NoError(t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	for _, a := range f.allocs {
		if a.ID == alloc {
			a.Job, a.ModifyIndex, a.AllocModifyIndex = j, f.index, f.index
		}
	}
}

func countOf(f *fakeNomad, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return pin.Count(f.jobs[id].TaskGroups[0])
}

// The same batch file registered again while it runs, one of its two
// allocations completed: the pin written for it (the earlier pin, byte for
// byte) is a new version of the job, which Nomad's reconciler would run
// whole again, the completed one included (it ignores the terminal
// allocations of an older version of a batch job). It is written with the
// count lowered by what ended, so that Nomad places nothing: the running
// one is as many as the count. The file registered again then, count 2
// again, is lowered again; a changed file is not (Nomad alone runs a
// changed batch job again whole); once all ended, the file is left at the
// gate, as before.
func TestABatchGroupRegisteredAgainCountsWhatEnded(t *testing.T) {
	file := func() *api.Job {
		j := gated("etl", 25)
		j.Type = ptr("batch")
		j.TaskGroups[0].Count = ptr(2)
		return j
	}

	t.Run("unchanged: lowered, the pin as before", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, false)
		f.name("alloc-a", 0)
		f.name("alloc-b", 1)
		first := pinOf(t, f.jobs["etl"])
		for round := range 2 {
			registers := f.registers
			f.put(file())
			onePass(t, s)
			must.SliceEmpty(t, pin.Gated(f.jobs["etl"]), must.Sprint(round))
			must.Greater(t, registers, f.registers, must.Sprint("pinned, round ", round))
			must.Eq(t, first, pinOf(t, f.jobs["etl"]), must.Sprint("the earlier pin, byte for byte"))
			must.Eq(t, 1, countOf(f, "etl"), must.Sprint("the completed one is not run again, round ", round))
			must.Zero(t, restarts(t, s), must.Sprint("the running one is updated in place, round ", round))
			f.updatedInPlace(t, "etl", "alloc-b")
			onePass(t, s)
			must.Eq(t, lifecycle.Running, stageOf(s, "etl").State, must.Sprint("round ", round, ": ", stageOf(s, "etl").Why))
		}

		// both ended: done; the file registered again stays at the gate
		f.setAlloc("etl", "alloc-b", "", nil, "complete", "run")
		onePass(t, s)
		must.Eq(t, lifecycle.Done, stageOf(s, "etl").State, must.Sprint(stageOf(s, "etl").Why))
		registers := f.registers
		f.put(file())
		onePass(t, s)
		st := stageOf(s, "etl")
		must.Eq(t, lifecycle.Done, st.State, must.Sprint(st.Why))
		must.StrContains(t, st.Why, "registered again unchanged after its run ended")
		must.Eq(t, registers, f.registers)
	})

	t.Run("changed: run again whole, as Nomad alone would", func(t *testing.T) {
		f, s, _, _ := batchOfTwo(t, false)
		f.name("alloc-a", 0)
		f.name("alloc-b", 1)
		j := file()
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"EPOCHS": "20"}
		f.put(j)
		onePass(t, s)
		must.SliceEmpty(t, pin.Gated(f.jobs["etl"]))
		must.Eq(t, 2, countOf(f, "etl"))
	})
}

// A batch group pinned again by the scheduler (the pinned capacity of an
// allocation it still misses is gone) writes a new version of the job
// too: its count is lowered by what ended in the current version, and
// only what is missing is placed again.
func TestABatchGroupPinnedAgainCountsWhatEnded(t *testing.T) {
	j := gated("etl", 25)
	j.Type = ptr("batch")
	j.TaskGroups[0].Count = ptr(3)
	nodes := []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1"), dgx1As(t, "node-3", "dc1")}
	f, s, rec := placedFirst(t, j, nodes...)
	f.setAlloc("etl", "alloc-a", "node-1", sharesOn(t, f, rec, "node-1"), "running", "run")
	f.setAlloc("etl", "alloc-b", "node-2", sharesOn(t, f, rec, "node-2"), "running", "run")
	f.name("alloc-a", 0)
	f.name("alloc-b", 1)
	f.setAlloc("etl", "alloc-a", "", nil, "complete", "run")
	onePass(t, s)
	must.Eq(t, 1, stageOf(s, "etl").Missing)
	registers := f.registers

	// node-3, where the third was pinned, and node-1, where the completed
	// one freed its shares, are lost: pinned again
	f.nodeDown("node-1")
	f.nodeDown("node-3")
	onePass(t, s)
	must.Greater(t, registers, f.registers, must.Sprint(stageOf(s, "etl").Why))
	again, ok := pin.ParseRecord(f.jobs["etl"], "g")
	must.True(t, ok)
	must.Eq(t, []string{"node-2"}, again.Nodes)
	must.Eq(t, 2, countOf(f, "etl"), must.Sprint("the completed one is one of the count no more: not run again"))
}
