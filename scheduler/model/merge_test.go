package model

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func jobAt(id string, index uint64, meta string) *api.Job {
	return &api.Job{ID: ptr(id), Namespace: ptr("default"), ModifyIndex: ptr(index), Meta: map[string]string{"v": meta}}
}

func allocAt(id, job string, index uint64, status string) *api.Allocation {
	return &api.Allocation{ID: id, Namespace: "default", JobID: job, ModifyIndex: index, ClientStatus: status}
}

func nodeAt(id string, index uint64, status string) *api.Node {
	return &api.Node{ID: id, ModifyIndex: index, Status: status}
}

// listing lists everything at the same index.
func listing(index uint64, nodes []*api.Node, jobs []*api.Job, allocs []*api.Allocation) *Listing {
	return &Listing{Nodes: nodes, NodesIndex: index, Jobs: jobs, JobsIndex: index, Allocs: allocs, AllocsIndex: index}
}

func TestRelistFillsAnEmptyState(t *testing.T) {
	s := New()
	l := &Listing{
		Nodes: []*api.Node{nodeAt("n1", 3, "ready")}, NodesIndex: 12,
		Jobs: []*api.Job{jobAt("a", 7, "1")}, JobsIndex: 10,
		Allocs: []*api.Allocation{allocAt("a1", "a", 9, "running")}, AllocsIndex: 15,
	}
	must.Eq(t, uint64(10), l.Index()) // the lowest of the three
	st := s.Relist(l)
	must.Eq(t, RelistStats{}, st)
	must.MapLen(t, 1, s.Nodes)
	must.MapContainsKey(t, s.Jobs, "default/a")
	must.MapContainsKey(t, s.Allocs, "a1")
	must.Eq(t, uint64(10), s.Index)
}

// Events brought the state to index 120; a listing read at 100 (a lagging
// server) holds older versions of everything: none of them wins.
func TestRelistOlderThanTheEventsDoesNotRollBack(t *testing.T) {
	s := New()
	s.PutNode(nodeAt("n1", 110, "down"))
	s.PutJob(jobAt("a", 115, "new"))
	s.PutAlloc(allocAt("a1", "a", 120, "complete"))
	s.Index = 120

	st := s.Relist(listing(100, []*api.Node{nodeAt("n1", 90, "ready")}, []*api.Job{jobAt("a", 80, "old")},
		[]*api.Allocation{allocAt("a1", "a", 95, "running")}))
	must.Eq(t, 3, st.Kept)
	must.Eq(t, "down", s.Nodes["n1"].Status)
	must.Eq(t, "new", s.Jobs["default/a"].Meta["v"])
	must.Eq(t, "complete", s.Allocs["a1"].ClientStatus)
	must.Eq(t, uint64(120), s.Index) // never goes down

	// a newer listing wins
	s.Relist(listing(130, []*api.Node{nodeAt("n1", 125, "ready")}, []*api.Job{jobAt("a", 126, "newer")},
		[]*api.Allocation{allocAt("a1", "a", 127, "running")}))
	must.Eq(t, "ready", s.Nodes["n1"].Status)
	must.Eq(t, "newer", s.Jobs["default/a"].Meta["v"])
	must.Eq(t, "running", s.Allocs["a1"].ClientStatus)
	must.Eq(t, uint64(130), s.Index)
}

// Objects the listing lacks: gone if the listing of their kind is at or
// above their modify index, kept if they appeared after its snapshot.
func TestRelistRemovesOnlyWhatTheListingShowsGone(t *testing.T) {
	s := New()
	s.PutNode(nodeAt("old-node", 50, "ready"))
	s.PutNode(nodeAt("new-node", 105, "ready"))
	s.PutJob(jobAt("old", 60, ""))
	s.PutJob(jobAt("new", 101, ""))
	s.PutAlloc(allocAt("old-alloc", "old", 70, "complete"))
	s.PutAlloc(allocAt("new-alloc", "new", 102, "pending"))
	s.PutAlloc(allocAt("edge", "old", 100, "complete")) // at the listing's index: the listing saw it

	st := s.Relist(listing(100, nil, nil, nil))
	must.Eq(t, RelistStats{Kept: 3, Removed: 4}, st)
	must.MapContainsKeys(t, s.Nodes, []string{"new-node"})
	must.MapNotContainsKey(t, s.Nodes, "old-node")
	must.MapContainsKey(t, s.Jobs, "default/new")
	must.MapNotContainsKey(t, s.Jobs, "default/old")
	must.MapContainsKey(t, s.Allocs, "new-alloc")
	must.MapNotContainsKey(t, s.Allocs, "old-alloc")
	must.MapNotContainsKey(t, s.Allocs, "edge")
}

// Each kind is judged by its own listing's index: a job listed at 100 and
// missing was gone at 100 even if the nodes were listed at 90.
func TestRelistJudgesEachKindByItsIndex(t *testing.T) {
	s := New()
	s.PutNode(nodeAt("n", 95, "ready"))
	s.PutJob(jobAt("j", 95, ""))
	s.Relist(&Listing{NodesIndex: 90, JobsIndex: 100, AllocsIndex: 100})
	must.MapContainsKey(t, s.Nodes, "n")
	must.MapNotContainsKey(t, s.Jobs, "default/j")
}

// A purge and a node deregistration seen at 120 are not undone by a
// listing read at 100 that still holds them; a later re-registration is
// listed normally.
func TestRelistDoesNotResurrectDeletions(t *testing.T) {
	s := New()
	s.PutNode(nodeAt("n1", 50, "ready"))
	s.PutJob(jobAt("a", 60, ""))
	s.PutAlloc(allocAt("a1", "a", 70, "running"))
	s.DeleteJobAt("default", "a", 120)
	s.DeleteNodeAt("n1", 121)
	must.MapEmpty(t, s.Jobs)
	must.MapEmpty(t, s.Allocs)
	must.MapEmpty(t, s.Nodes)

	stale := listing(100, []*api.Node{nodeAt("n1", 50, "ready")}, []*api.Job{jobAt("a", 60, "")},
		[]*api.Allocation{allocAt("a1", "a", 70, "running"), allocAt("a2", "a", 80, "running")})
	st := s.Relist(stale)
	must.Eq(t, 4, st.Kept)
	must.MapEmpty(t, s.Jobs)
	must.MapEmpty(t, s.Allocs) // a2 too: its job was purged after it
	must.MapEmpty(t, s.Nodes)

	again := listing(130, []*api.Node{nodeAt("n1", 125, "ready")}, []*api.Job{jobAt("a", 126, "")},
		[]*api.Allocation{allocAt("a3", "a", 127, "pending")})
	s.Relist(again)
	must.MapContainsKey(t, s.Nodes, "n1")
	must.MapContainsKey(t, s.Jobs, "default/a")
	must.MapContainsKey(t, s.Allocs, "a3")
	must.MapEmpty(t, s.Gone) // the listing at 130 already shows both deletions
}

// A purge replayed after the job was registered again (the stream resumes
// below events already applied) leaves the newer job and its allocations.
func TestReplayedDeletionsKeepNewerObjects(t *testing.T) {
	s := New()
	s.PutJob(jobAt("a", 130, "again"))
	s.PutAlloc(allocAt("a1", "a", 90, "complete"))
	s.PutAlloc(allocAt("a2", "a", 131, "running"))
	s.PutNode(nodeAt("n1", 140, "ready"))
	s.DeleteJobAt("default", "a", 120)
	s.DeleteNodeAt("n1", 121)
	must.MapContainsKey(t, s.Jobs, "default/a")
	must.MapContainsKey(t, s.Allocs, "a1")
	must.MapContainsKey(t, s.Allocs, "a2")
	must.MapContainsKey(t, s.Nodes, "n1")
}

// An allocation the listing shows at the version the model holds is not
// stored again (a relist of 100,000 allocations slimmed and compared each
// again, with the scheduler's lock held): the model keeps its own object,
// whatever the listing's copy of that version says (here, a list stub's
// task states, which the event's version had more of); one at a new
// version is stored.
func TestRelistKeepsAnAllocationAtTheSameVersion(t *testing.T) {
	s := New()
	s.PutJob(jobAt("a", 5, ""))
	withTasks := allocAt("a1", "a", 9, "running")
	withTasks.TaskStates = map[string]*api.TaskState{"t": {State: "running", StartedAt: time.Unix(100, 0)}}
	s.PutAlloc(withTasks)
	s.PutAlloc(allocAt("a2", "a", 9, "running"))
	s.Index = 10
	kept, moved := s.Allocs["a1"], s.Allocs["a2"]
	must.MapLen(t, 1, kept.TaskStates)
	st := s.Relist(listing(20, nil, []*api.Job{jobAt("a", 5, "")},
		[]*api.Allocation{allocAt("a1", "a", 9, "running"), allocAt("a2", "a", 12, "complete")}))
	must.Eq(t, RelistStats{}, st)
	must.True(t, kept == s.Allocs["a1"], must.Sprint("the same version was stored again"))
	must.Eq(t, "running", s.Allocs["a1"].ClientStatus)
	must.False(t, moved == s.Allocs["a2"])
	must.Eq(t, "complete", s.Allocs["a2"].ClientStatus)
}
