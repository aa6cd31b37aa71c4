package service

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A relist of a cluster in which nothing changed reads no node and no job
// again: it costs its list requests only (nodes, the jobs of each
// namespace, allocations, failed evaluations). A changed job and a changed
// node are read, alone; a job the scheduler registered itself is read
// back once. Before, every relist read every node and every job, one
// request each (about 110,000 at 10,000 nodes and 100,000 jobs).
func TestRelistReadsOnlyWhatChanged(t *testing.T) {
	f := &fakeNomad{nodes: twoDGX1(t), jobs: map[string]*api.Job{}}
	for i := range 20 {
		f.put(gated(fmt.Sprintf("j%02d", i), 1600)) // never fits: none is pinned
	}
	s := newTestService(t, f)
	must.Eq(t, 2, f.nodeReads)
	must.Eq(t, 20, f.jobReads)

	nodes, jobs := f.nodeReads, f.jobReads
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, nodes, f.nodeReads, must.Sprint("no node read again"))
	must.Eq(t, jobs, f.jobReads, must.Sprint("no job read again"))

	f.put(withMeta(f.jobs["j03"], "v", "2"))
	f.nodes[1].SchedulingEligibility = "ineligible"
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, nodes+1, f.nodeReads)
	must.Eq(t, jobs+1, f.jobReads)
	s.mu.Lock()
	must.Eq(t, "2", s.state.Jobs["default/j03"].Meta["v"])
	must.Eq(t, "ineligible", s.state.Nodes["node-2"].SchedulingEligibility)
	must.Eq(t, 20, len(s.state.Jobs))
	s.mu.Unlock()

	// a job gone is gone from the model though nothing is read
	f.mu.Lock()
	delete(f.jobs, "j05")
	f.index++
	f.mu.Unlock()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	must.MapNotContainsKey(t, s.state.Jobs, "default/j05")
	s.mu.Unlock()
	must.Eq(t, jobs+1, f.jobReads)

	// a pin's own version is read back once, then not again
	f.put(gated("fits", 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	read := f.jobReads
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, read+1, f.jobReads, must.Sprint("the pinned version, as Nomad holds it"))
	must.NoError(t, s.watcher.resync(t.Context()))
	must.Eq(t, read+1, f.jobReads)
}

// An allocation event carries what the allocation holds: it is not read
// again (it was, for every new live allocation).
func TestAllocationEventIsNotReadAgain(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	w := startWatch(t, f, config.Default())
	fs := w.next()
	a := &api.Allocation{ID: "al", Namespace: "default", JobID: "x", TaskGroup: "g", NodeID: "node-1", DesiredStatus: "run", ClientStatus: "running",
		ModifyIndex: 5, CreateIndex: 5, AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: []string{"GPU-x:1"}}}}}}}
	w.send(fs, allocEvent(t, a))
	must.NotNil(t, w.alloc("al"))
	must.Eq(t, 0, f.allocReads)
	b := *a
	b.ID, b.AllocatedResources = "bare", nil
	f.allocs = append(f.allocs, a, &b)
	w.send(fs, allocEvent(t, &b))
	must.NotNil(t, w.alloc("bare"))
	must.Eq(t, 1, f.allocReads, must.Sprint("an event without what it holds: read once"))
}

// Every resync_interval the cluster is listed beside the event stream:
// events are applied while the listing runs, and the stream stays open.
// Before, each periodic listing closed the stream, and no event was
// applied until the listing was done and the stream opened again.
func TestPeriodicListingKeepsApplyingEvents(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	cfg := config.Default()
	cfg.ResyncInterval = "20ms"
	var lists atomic.Int32
	blocked, release := make(chan struct{}, 1), make(chan struct{})
	f.beforeList = func(kind string) {
		if kind == "nodes" && lists.Add(1) == 2 { // the first periodic listing waits
			blocked <- struct{}{}
			<-release
		}
	}
	w := startWatch(t, f, cfg)
	fs := w.next()
	select {
	case <-blocked:
	case <-time.After(wait):
		t.Fatal("no periodic listing")
	}
	j := gated("during", 10)
	j.ModifyIndex, j.JobModifyIndex, j.CreateIndex, j.Version = ptr(uint64(100)), ptr(uint64(100)), ptr(uint64(100)), ptr(uint64(0))
	w.send(fs, jobEvent(t, j))
	must.NotNil(t, w.job("default/during"), must.Sprint("applied while the listing runs"))
	close(release)
	for lists.Load() < 4 { // two more periodic listings, on the same stream
		time.Sleep(5 * time.Millisecond)
	}
	w.quiet()
	must.NotNil(t, w.job("default/during"), must.Sprint("a listing older than the event does not remove it"))
}
