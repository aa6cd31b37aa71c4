package model

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// EndedNames counts a batch group's names by their last allocation:
// completed, or failed with no reschedule left, ended; one that runs, is
// lost, or failed with an attempt left (or replaced) did not. With current,
// only what ended in the job's current version counts.
func TestEndedNamesCountsNamesByTheirLastAllocation(t *testing.T) {
	t0 := time.Unix(1_000_000, 0).UTC()
	named := func(a *api.Allocation, index int, create, modify uint64) *api.Allocation {
		a.Name, a.CreateIndex, a.AllocModifyIndex = "etl.g["+string(rune('0'+index))+"]", create, modify
		return a
	}
	status := func(id, s string) *api.Allocation {
		return &api.Allocation{ID: id, JobID: "etl", TaskGroup: "g", DesiredStatus: "run", ClientStatus: s}
	}
	job := batchJob(5, &api.ReschedulePolicy{Attempts: ptr(0)}) // JobModifyIndex 10: current from 10 on
	all := []*api.Allocation{
		named(status("a", "complete"), 0, 5, 5),             // ended, an older version
		named(status("b", "complete"), 1, 12, 12),           // ended, current
		named(failedAt("c", t0), 2, 6, 6),                   // failed, rescheduling disabled: ended, older
		named(status("d1", "failed"), 3, 7, 7),              // failed, then run again:
		named(status("d2", "running"), 3, 13, 13),           //   its last runs
		named(status("e", "lost"), 4, 8, 8),                 // lost: placed again
		named(status("x", "complete"), 1, 3, 3),             // an earlier run of name 1
		{ID: "y", TaskGroup: "g", ClientStatus: "complete"}, // no name: not counted
		named(status("z", "complete"), 0, 20, 20),           // another group's
	}
	all[len(all)-1].TaskGroup = "h"
	must.Eq(t, 3, EndedNames(all, job, "g", false), must.Sprint("names 0, 1 and 2"))
	must.Eq(t, 1, EndedNames(all, job, "g", true), must.Sprint("name 1 only ended in the current version"))

	service := batchJob(5, nil)
	service.Type = ptr("service")
	must.Eq(t, 0, EndedNames(all, service, "g", false))
	sysbatch := batchJob(5, nil)
	sysbatch.Type = ptr("sysbatch")
	must.Eq(t, 0, EndedNames(all, sysbatch, "g", false))
	periodic := batchJob(5, nil)
	periodic.Periodic = &api.PeriodicConfig{}
	must.Eq(t, 0, EndedNames(all, periodic, "g", false), must.Sprint("a template runs nothing itself"))

	for name, want := range map[string]int{"etl.g[0]": 0, "etl.g[12]": 12, "a.b.c[3]": 3} {
		i, ok := NameIndex(name)
		must.True(t, ok, must.Sprint(name))
		must.Eq(t, want, i)
	}
	for _, name := range []string{"", "etl.g", "etl.g[x]", "etl.g[-1]", "etl.g[1"} {
		_, ok := NameIndex(name)
		must.False(t, ok, must.Sprint(name))
	}
}
