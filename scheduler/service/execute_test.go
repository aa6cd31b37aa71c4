package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// deadlineNomad is a Nomad whose registrations hang until their context
// ends (the job is edited meanwhile) and whose reads fail, as the HTTP
// client's do, on the context of a registration that timed out or one
// derived from it (a deadline no later than the registration's). A read
// on a request of its own is answered however long it took to send, so
// the test does not depend on the machine's speed.
type deadlineNomad struct {
	*fakeNomad
	edit func()

	mu        sync.Mutex
	timedOut  time.Time // the deadline of the registration that timed out
	staleRead error     // a read refused on an ended registration's context
}

func (d *deadlineNomad) Register(ctx context.Context, _ *api.Job, _ uint64) (uint64, error) {
	if d.edit != nil {
		d.edit()
		d.edit = nil
	}
	<-ctx.Done()
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.timedOut = dl
	d.mu.Unlock()
	return 0, ctx.Err()
}

func (d *deadlineNomad) Job(ctx context.Context, ns, id string) (*api.Job, error) {
	d.mu.Lock()
	timedOut := d.timedOut
	d.mu.Unlock()
	if err := ctx.Err(); err != nil && !timedOut.IsZero() {
		if dl, ok := ctx.Deadline(); !ok || !dl.After(timedOut) {
			d.mu.Lock()
			d.staleRead = err
			d.mu.Unlock()
			return nil, err
		}
	}
	return d.fakeNomad.Job(ctx, ns, id)
}

// After a registration that timed out, the job is read again with a
// request of its own: the model learns the version Nomad holds (here a
// user's edit made while the registration hung).
func TestTimedOutPinReadsTheJobAgain(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	d := &deadlineNomad{fakeNomad: f}
	d.edit = func() {
		edited, err := copyJob(f.jobs["x"])
		must.NoError(t, err)
		edited.Meta["owner"] = "someone"
		f.put(edited)
	}
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "100ms"
	s, err := newService(cfg, hclog.NewNullLogger(), d, time.Now)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[key("x")], "deadline exceeded")
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.state.Jobs[model.JobKey("default", "x")]
	must.Eq(t, *f.jobs["x"].JobModifyIndex, *got.JobModifyIndex)
	must.Eq(t, "someone", got.Meta["owner"])
	must.Eq(t, []string{"g"}, pin.Gated(got))
	must.NoError(t, d.staleRead)
}

// A failed unpairing hands on nothing: the step counted the moved
// allocation's shares free and gave them to a waiting job, but the
// allocation still runs, so that job is not pinned onto them in the same
// pass; once the unpairing succeeds it is.
func TestFailedUnpairHandsNoSharesOn(t *testing.T) {
	sc := newPairScene(t)
	node, err := model.NodeOf(sc.f.nodes[0])
	must.NoError(t, err)
	paired := sc.old.GPUs[0]
	taken := map[string]bool{}
	for _, sh := range append(slices.Clone(sc.old.Shares), sc.new.Shares...) {
		taken[sh] = true
	}
	for g, gpu := range node.GPUs { // every other share runs a filler: the cluster is full
		var shares []string
		for k := range 100 {
			if sh := (devicefn.ShareID{UUID: gpu.UUID, Index: k}).String(); !taken[sh] {
				shares = append(shares, sh)
			}
		}
		fill(t, sc.f.fakeNomad, fmt.Sprintf("filler-%d", g), shares)
	}
	w := gated("w", 25)
	w.SubmitTime = ptr(int64(1))
	sc.f.put(w)
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(sc.f.jobs["w"])) // no room yet

	sc.f.stopErr = errors.New("Unexpected response code: 503 (no leader)")
	var steps [][]decide.Action
	sc.s.loop.onStep = func(a []decide.Action) { steps = append(steps, a) }
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	last := steps[len(steps)-1]
	must.Eq(t, decide.Unpair, last[0].Kind)
	must.True(t, slices.ContainsFunc(last, func(a decide.Action) bool { return a.Kind == decide.Pin && a.Group == key("w") }))
	must.Eq(t, []string{"g"}, pin.Gated(sc.f.jobs["w"]))
	must.StrContains(t, sc.s.loop.answers.pending[key("w")], "stopping that allocation failed")

	sc.f.stopErr = nil
	sc.sample(t, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	rec, ok := pin.ParseRecord(sc.f.jobs["w"], "g")
	must.True(t, ok)
	must.Eq(t, []string{paired}, rec.GPUs)
}

// fill runs a placed job "id" as one allocation on shares of the node.
func fill(t *testing.T, f *fakeNomad, id string, shares []string) {
	t.Helper()
	if len(shares) == 0 {
		return
	}
	job := gated(id, uint64(len(shares)))
	job.TaskGroups[0].Constraints = nil
	f.put(job)
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}}}}}})
}

// An unpaired job keeps its place in the queue: Nomad stamps the
// scheduler's registration as a new submission, but the scheduler decides
// on when the job was submitted, kept in its records for the next leader,
// until someone else registers the job.
func TestUnpairedJobKeepsItsPlace(t *testing.T) {
	sc := newPairScene(t)
	sc.f.submitNow = func() time.Time { return *sc.clock }
	submitted := time.Unix(5000, 0)
	sc.f.mu.Lock()
	sc.f.jobs["new"].SubmitTime = ptr(submitted.UnixNano()) // as its user submitted it
	sc.f.mu.Unlock()
	must.NoError(t, sc.s.watcher.resync(t.Context()))
	sc.s.records.stateLoaded = true // records are saved
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	must.Eq(t, sc.clock.UnixNano(), *sc.f.jobs["new"].SubmitTime) // Nomad's stamp
	// Nomad stops the allocation
	sc.f.allocs = slices.DeleteFunc(sc.f.allocs, func(a *api.Allocation) bool { return a.ID == "alloc-new" })
	sc.f.index++
	must.NoError(t, sc.s.watcher.resync(t.Context()))

	submitOf := func(s *Service) time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		groups, _, _, _ := collectReading(s.loop, s.state.Snapshot(s.loop.profile, nil), 0)
		for _, g := range groups {
			if g.Key == key("new") {
				return g.Submit
			}
		}
		t.Fatal("new is not decided")
		return time.Time{}
	}
	must.Eq(t, submitted, submitOf(sc.s))
	sc.s.records.saveState(t.Context())
	next, err := newService(sc.s.cfg, hclog.NewNullLogger(), sc.f, func() time.Time { return *sc.clock })
	must.NoError(t, err)
	must.NoError(t, next.watcher.resync(t.Context()))
	must.NoError(t, next.records.loadState(t.Context(), true))
	must.Eq(t, submitted, submitOf(next))

	// its user submits it again: that is its place now
	edited, err := copyJob(sc.f.jobs["new"])
	must.NoError(t, err)
	edited.SubmitTime = ptr(time.Unix(90000, 0).UnixNano())
	sc.f.put(edited)
	must.NoError(t, next.watcher.resync(t.Context()))
	must.Eq(t, time.Unix(90000, 0), submitOf(next))
	next.records.stateLoaded = true
	next.records.saveState(t.Context())
	must.MapEmpty(t, next.records.submitted)
}

// slowStops is a Nomad whose registrations and stops each take a while,
// and fail when their context ends first. It notes when the last
// registration returned and the deadline of each stop's context.
type slowStops struct {
	*statsNomad
	delay time.Duration

	mu             sync.Mutex
	registered     time.Time   // when the last registration returned
	stopDeadlines  []time.Time // of each stop's context
	afterRegisters []time.Time // the last registration's return, at each stop
}

func (n *slowStops) wait(ctx context.Context) error {
	sleep(ctx, n.delay)
	return ctx.Err()
}

func (n *slowStops) Register(ctx context.Context, j *api.Job, index uint64) (uint64, error) {
	if err := n.wait(ctx); err != nil {
		return 0, err
	}
	defer func() {
		n.mu.Lock()
		n.registered = time.Now()
		n.mu.Unlock()
	}()
	return n.statsNomad.Register(ctx, j, index)
}

func (n *slowStops) StopAlloc(ctx context.Context, id string) error {
	dl, _ := ctx.Deadline()
	n.mu.Lock()
	n.stopDeadlines = append(n.stopDeadlines, dl)
	n.afterRegisters = append(n.afterRegisters, n.registered)
	n.mu.Unlock()
	if err := n.wait(ctx); err != nil {
		return err
	}
	return n.statsNomad.StopAlloc(ctx, id)
}

// Gating a group again and stopping its allocation are requests of their
// own, each with the whole request timeout: a slow registration does not
// use up the stop's. The stop's deadline is a whole request timeout after
// the registration returned (a timeout shared with the registration would
// end a timeout after the registration started); the timeout is long, so
// no request here ends for want of time whatever the machine's speed.
func TestUnpairRequestsEachHaveTheirTimeout(t *testing.T) {
	const timeout = 5 * time.Minute
	sc := newPairScene(t, func(c *config.Config) { c.Nomad.RequestTimeout = timeout.String() })
	slow := &slowStops{statsNomad: sc.f, delay: 20 * time.Millisecond}
	sc.s.loop.nomad, sc.s.loop.gate.nomad, sc.s.loop.pins.nomad = slow, slow, slow
	sc.sample(t, 20, 20, 20)
	sc.s.loop.reconcile(t.Context())
	must.Eq(t, []string{"alloc-new"}, sc.f.stopped)
	must.Eq(t, 1.0, counterValue(t, sc.s, "gpushare_unpairs_total"))
	must.SliceLen(t, 1, slow.stopDeadlines)
	must.False(t, slow.afterRegisters[0].IsZero(), must.Sprint("the group was gated again before its allocation was stopped"))
	must.False(t, slow.stopDeadlines[0].Before(slow.afterRegisters[0].Add(timeout)),
		must.Sprintf("the stop's deadline %v is a whole timeout after the registration returned at %v", slow.stopDeadlines[0], slow.afterRegisters[0]))
}

// A group that waits while the scheduler pins another group of its job
// keeps the job's place in the queue: the pin's registration is no new
// submission.
func TestWaitingGroupKeepsItsPlaceAcrossAPinOfAnother(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, submitNow: func() time.Time { return time.Unix(9000, 0) }}
	running(t, f, "busy", []int{0}, 0, "2h")
	job := gated("two", 25)
	big := *job.TaskGroups[0]
	big.Name = ptr("h")
	big.Tasks = []*api.Task{{Name: "t", Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(128),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptr(uint64(800))}}}}}
	job.TaskGroups = append(job.TaskGroups, &big)
	job.SubmitTime = ptr(time.Unix(500, 0).UnixNano())
	f.put(job)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"h"}, pin.Gated(f.jobs["two"]))
	must.Eq(t, time.Unix(9000, 0).UnixNano(), *f.jobs["two"].SubmitTime)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	defer s.mu.Unlock()
	groups, _, _, _ := collectReading(s.loop, s.state.Snapshot(s.loop.profile, nil), 0)
	must.SliceLen(t, 1, groups)
	must.Eq(t, "h", groups[0].Key.Group)
	must.Eq(t, time.Unix(500, 0), groups[0].Submit)
}
