package model

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A completed allocation of a batch group's current version is one of its
// count, as Nomad's reconciler counts it: the rest are still missing
// (their pinned shares held), and the group is done only once all of its
// count completed. A failed or lost one is missing (Nomad replaces it); a
// completed one of an older version counts for nothing (a run again).
func TestMissingCountsCompletedAllocationsOfABatchGroup(t *testing.T) {
	st := New()
	job := &api.Job{ID: ptr("etl"), Namespace: ptr("default"), Type: ptr("batch"), JobModifyIndex: ptr(uint64(10)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(3)}}}
	st.PutJob(job)
	tg := job.TaskGroups[0]
	alloc := func(id, status string, index uint64) {
		st.PutAlloc(&api.Allocation{ID: id, Namespace: "default", JobID: "etl", TaskGroup: "g", DesiredStatus: "run",
			ClientStatus: status, CreateIndex: index, ModifyIndex: index})
	}
	missing := func() int { _, n := st.Missing(job, tg); return n }

	alloc("old", "complete", 5) // of the version before
	must.Eq(t, 3, missing())
	alloc("a", "complete", 11)
	must.Eq(t, 2, missing(), must.Sprint("one of three completed: two still to place"))
	must.False(t, st.BatchDone(job, "g"))
	alloc("b", "failed", 12)
	alloc("c", "lost", 13)
	must.Eq(t, 2, missing(), must.Sprint("a failed and a lost one are replaced"))
	alloc("d", "running", 14)
	must.Eq(t, 1, missing())
	alloc("d", "complete", 15)
	alloc("e", "complete", 16)
	must.Eq(t, 0, missing())
	must.True(t, st.BatchDone(job, "g"), must.Sprint("all three completed"))

	service := &api.Job{ID: ptr("web"), Namespace: ptr("default"), Type: ptr("service"), JobModifyIndex: ptr(uint64(10)),
		TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: ptr(2)}}}
	st.PutJob(service)
	st.PutAlloc(&api.Allocation{ID: "w", Namespace: "default", JobID: "web", TaskGroup: "g", DesiredStatus: "run", ClientStatus: "complete", CreateIndex: 11})
	_, n := st.Missing(service, service.TaskGroups[0])
	must.Eq(t, 2, n, must.Sprint("a service group's completed allocation is replaced"))
	must.False(t, st.BatchDone(service, "g"))
}
