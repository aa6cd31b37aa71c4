package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.at = c.at.Add(d)
	c.mu.Unlock()
}

// clockedService is loadedService on a clock the test moves, over n
// (a fakeNomad or one that wraps it).
func clockedService(t *testing.T, n nomadAPI) (*Service, *fakeClock) {
	t.Helper()
	clock := &fakeClock{at: time.Unix(1000, 0)}
	s, err := newService(config.Default(), hclog.NewNullLogger(), n, clock.now)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	must.NoError(t, s.records.loadSecret(t.Context(), true))
	must.NoError(t, s.records.loadState(t.Context(), true))
	return s, clock
}

// placeHolds has the fake Nomad place the holds it registered unplaced.
func (f *fakeNomad) placeHolds() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, j := range f.jobs {
		if !isHold(id) || j.Stop != nil && *j.Stop || slices.ContainsFunc(f.allocs, func(a *api.Allocation) bool { return a.JobID == id }) {
			continue
		}
		f.index++
		f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: nsOf(j), JobID: id, TaskGroup: "hold", NodeID: j.Meta[metaHoldNode],
			DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"hold": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: heldShares(j)}}}}}})
	}
}

// twoOnOneNode is a fake Nomad of one DGX-1 that runs raw_exec, and a
// gated job "two" of two one-GPU allocations: staged there.
func twoOnOneNode(t *testing.T) *fakeNomad {
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	j := gated("two", 100)
	j.TaskGroups[0].Count = ptr(2)
	f.put(j)
	return f
}

// A hold Nomad does not place at once holds no pass up: the pass
// registers it, looks once, and leaves the group waiting with its hold
// kept (it used to wait up to 30 s in the pass, on the wall clock, then
// let the hold go and back the group off, at every retry). A later pass
// that finds it placed pins the group, with the hold it registered.
func TestAnUnplacedHoldDoesNotHoldThePassUp(t *testing.T) {
	f := twoOnOneNode(t)
	f.holdUnplaced = true
	s, clock := clockedService(t, f)
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.False(t, ok, must.Sprint("not pinned before its hold is placed"))
	must.SliceLen(t, 1, f.liveHolds(), must.Sprint("the hold is kept while Nomad places it"))
	must.SliceEmpty(t, f.holdsStopped)
	must.StrContains(t, s.loop.answers.pending[key("two")], "waiting for Nomad to place the holds of its GPUs")
	must.Eq(t, 1, f.holdsRegistered)

	// 10 s on, not placed yet: the same hold is kept, not registered again
	clock.add(10 * time.Second)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.liveHolds())
	must.Eq(t, 1, f.holdsRegistered)
	must.StrContains(t, s.loop.answers.pending[key("two")], "registered 10s ago")

	// placed: pinned, the hold kept until the first allocation runs
	f.placeHolds()
	clock.add(5 * time.Second)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("two")]))
	must.MapLen(t, 2, byGPU(rec.Shares))
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	must.Eq(t, 1, f.holdsRegistered)
	must.SliceContainsSubset(t, rec.Shares, heldShares(holds[0]))
}

// A hold Nomad has not placed holdPlaced after it was registered (on the
// service's clock) is let go, and the group is decided again, differently:
// not staged on that node (on the only node, one allocation per node
// waits for a second node, and says why), so the same hold is not
// registered again at every retry.
func TestAHoldNomadDoesNotPlaceIsDecidedDifferently(t *testing.T) {
	f := twoOnOneNode(t)
	f.holdUnplaced = true
	s, clock := clockedService(t, f)
	s.loop.reconcile(t.Context())
	must.SliceLen(t, 1, f.liveHolds())

	clock.add(holdPlaced)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, f.liveHolds(), must.Sprint("let go after 30 s"))
	must.StrContains(t, s.loop.answers.pending[key("two")], "Nomad did not place hold")

	for range 3 {
		clock.add(5 * time.Second)
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
	}
	must.Eq(t, 1, f.holdsRegistered, must.Sprint("not staged there again"))
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.False(t, ok)
	why := s.loop.answers.pending[key("two")]
	must.StrContains(t, why, "at most one whole-GPU allocation of a group per node")
	must.StrContains(t, why, "Nomad did not place a hold of its GPUs on node node-1 within 30s")

	// holdRefusedFor (10 minutes) later the node is staged again
	clock.add(10 * time.Minute)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, 2, f.holdsRegistered)
}

// nsNomad is a fake Nomad whose namespaces have capabilities, checked as
// Nomad checks a job it registers; read says whether the service may
// read them (else it learns them from the refusal).
type nsNomad struct {
	*fakeNomad
	caps map[string]*api.NamespaceCapabilities
	read bool
}

func (n *nsNomad) Namespace(_ context.Context, name string) (*api.Namespace, error) {
	if !n.read {
		return nil, errors.New("Permission denied")
	}
	return &api.Namespace{Name: name, Capabilities: n.caps[name]}, nil
}

func (n *nsNomad) RegisterHold(ctx context.Context, j *api.Job) error {
	c, d := n.caps[nsOf(j)], j.TaskGroups[0].Tasks[0].Driver
	if c != nil && (len(c.EnabledTaskDrivers) > 0 && !slices.Contains(c.EnabledTaskDrivers, d) || slices.Contains(c.DisabledTaskDrivers, d)) {
		return fmt.Errorf("Unexpected response code: 500 (used task driver %q is not allowed in namespace %q)", d, nsOf(j))
	}
	return n.fakeNomad.RegisterHold(ctx, j)
}

// twoGroups is a gated job of two groups: "g", two one-GPU allocations
// (staged on one node), and "h", one.
func twoGroups() *api.Job {
	j := gated("two", 100)
	j.TaskGroups[0].Count = ptr(2)
	h := gated("two", 100).TaskGroups[0]
	h.Name = ptr("h")
	j.TaskGroups = append(j.TaskGroups, h)
	return j
}

// A namespace whose capabilities refuse raw_exec and exec (a common
// hardening) refuses every hold: the staged group is decided again with
// one allocation per node, and says why; its job's other group is pinned
// in the same pass (a hold's error used to fail the whole registration,
// and the same staged decision was retried for ever). Read from the
// namespace, or learned from Nomad's refusal when the namespace cannot be
// read.
func TestAHoldTheNamespaceRefusesLeavesOnlyItsGroupOut(t *testing.T) {
	for _, read := range []bool{true, false} {
		t.Run(fmt.Sprint("read=", read), func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
			f.nodes[0].Drivers["exec"] = &api.DriverInfo{Detected: true, Healthy: true}
			f.put(twoGroups())
			n := &nsNomad{fakeNomad: f, read: read, caps: map[string]*api.NamespaceCapabilities{
				"default": {DisabledTaskDrivers: []string{"raw_exec", "exec"}}}}
			s, _ := clockedService(t, n)
			s.loop.reconcile(t.Context())
			hKey := key("two")
			hKey.Group = "h"
			_, ok := pin.ParseRecord(f.jobs["two"], "h")
			must.True(t, ok, must.Sprint("the other group is pinned: ", s.loop.answers.pending[hKey]))
			_, ok = pin.ParseRecord(f.jobs["two"], "g")
			must.False(t, ok)
			must.SliceEmpty(t, f.liveHolds())
			must.StrContains(t, s.loop.answers.pending[key("two")], "the namespace default does not allow the driver a hold")

			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			_, ok = pin.ParseRecord(f.jobs["two"], "g")
			must.False(t, ok)
			must.SliceEmpty(t, f.liveHolds())
			why := s.loop.answers.pending[key("two")]
			must.StrContains(t, why, "at most one whole-GPU allocation of a group per node")
			must.StrContains(t, why, "the namespace default does not allow the driver a hold of its GPUs would run with (its capabilities refuse exec and raw_exec")
			must.StrContains(t, why, "allow raw_exec or exec in the namespace's capabilities")
		})
	}
}

// A namespace that refuses raw_exec but allows exec stages with exec on
// a node that has both.
func TestAHoldRunsWithADriverItsNamespaceAllows(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
	f.nodes[0].Drivers["exec"] = &api.DriverInfo{Detected: true, Healthy: true}
	j := gated("two", 100)
	j.TaskGroups[0].Count = ptr(2)
	f.put(j)
	n := &nsNomad{fakeNomad: f, read: true, caps: map[string]*api.NamespaceCapabilities{"default": {EnabledTaskDrivers: []string{"docker", "exec"}}}}
	s, _ := clockedService(t, n)
	s.loop.reconcile(t.Context())
	_, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok, must.Sprint(s.loop.answers.pending[key("two")]))
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	must.Eq(t, "exec", holds[0].TaskGroups[0].Tasks[0].Driver)
}
