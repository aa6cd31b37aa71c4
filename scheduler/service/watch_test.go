package service

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// watching runs the watch loop of a service on f until the test ends; the
// test drives the event stream through the subscriptions next returns.
type watching struct {
	t *testing.T
	s *Service
	f *fakeNomad
}

func startWatch(t *testing.T, f *fakeNomad, cfg *config.Config) *watching {
	t.Helper()
	f.streams = make(chan *fakeStream)
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watcher.watch(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &watching{t: t, s: s, f: f}
}

// wait bounds every step: a step that never happens fails the test. It
// is a liveness bound only (a loaded machine may take seconds for one).
const wait = time.Minute

// next waits for the watch to list the cluster and subscribe.
func (w *watching) next() *fakeStream {
	w.t.Helper()
	select {
	case fs := <-w.f.streams:
		return fs
	case <-time.After(wait):
		w.t.Fatal("the watch did not subscribe to the event stream (no relist and reconnect)")
		return nil
	}
}

// send delivers events, then a heartbeat: once it is taken, the events
// before it are applied.
func (w *watching) send(fs *fakeStream, evs ...*api.Events) {
	w.t.Helper()
	for _, e := range append(evs, &api.Events{}) {
		select {
		case fs.ch <- e:
		case <-time.After(wait):
			w.t.Fatal("the watch stopped reading the event stream")
		}
	}
}

// quiet asserts the watch did not subscribe again.
func (w *watching) quiet() {
	w.t.Helper()
	select {
	case fs := <-w.f.streams:
		w.t.Fatalf("unexpected resubscription from index %d", fs.from)
	default:
	}
}

func (w *watching) job(key string) *api.Job {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.state.Jobs[key]
}

func (w *watching) alloc(id string) *api.Allocation {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.state.Allocs[id]
}

func (w *watching) node(id string) *api.Node {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.state.Nodes[id]
}

// payload is what the event stream carries: the object as JSON, decoded
// into a map.
func payload(t *testing.T, key string, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	must.NoError(t, err)
	var m map[string]any
	must.NoError(t, json.Unmarshal(b, &m))
	return map[string]any{key: m}
}

func jobEvent(t *testing.T, j *api.Job) *api.Events {
	c, err := copyJob(j)
	must.NoError(t, err)
	return &api.Events{Index: *j.ModifyIndex, Events: []api.Event{{Topic: api.TopicJob, Type: "JobRegistered", Key: *j.ID,
		Index: *j.ModifyIndex, Payload: payload(t, "Job", c)}}}
}

func allocEvent(t *testing.T, a *api.Allocation) *api.Events {
	return &api.Events{Index: a.ModifyIndex, Events: []api.Event{{Topic: api.TopicAllocation, Type: "AllocationUpdated", Key: a.ID,
		Index: a.ModifyIndex, Payload: payload(t, "Allocation", a)}}}
}

func withMeta(j *api.Job, k, v string) *api.Job {
	c, _ := copyJob(j)
	c.Meta[k] = v
	return c
}

// Nodes, jobs and allocations are listed one after the other; a job
// registered while the allocations are listed is in no listing, and the
// stream must resume below it: from the lowest listing index + 1. Events
// the listings already show are replayed harmlessly.
func TestWatchResumesFromTheLowestListingIndex(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	a := gated("a", 10)
	f.put(a)
	old := withMeta(f.jobs["a"], "v", "1") // index 1
	f.put(withMeta(a, "v", "2"))           // index 2: what the listing shows
	var late *api.Job
	f.beforeList = func(kind string) {
		if kind == "allocs" && late == nil {
			late = gated("late", 10)
			f.put(late) // index 3, while the allocations are listed
		}
	}
	w := startWatch(t, f, config.Default())
	fs := w.next()
	must.Eq(t, uint64(3), *late.ModifyIndex)
	must.Eq(t, 3, fs.from) // jobs listed at 2, allocations at 3
	must.Nil(t, w.job("default/late"))

	w.send(fs, jobEvent(t, old), jobEvent(t, late))
	must.NotNil(t, w.job("default/late"))
	must.Eq(t, "2", w.job("default/a").Meta["v"]) // the replayed older version did not win
	w.quiet()
}

// A payload that cannot be read is not dropped while the stream moves on:
// the watch lists the cluster again (which shows what the event said) and
// resumes after the listing. Replayed, it does not relist again.
func TestWatchRelistsOnAnUnreadableEvent(t *testing.T) {
	for name, bad := range map[string]func(f *fakeNomad, index uint64) api.Event{
		"job": func(_ *fakeNomad, i uint64) api.Event {
			return api.Event{Topic: api.TopicJob, Type: "JobRegistered", Key: "hidden", Index: i, Payload: map[string]any{"Job": "garbage"}}
		},
		"deregistered job": func(_ *fakeNomad, i uint64) api.Event {
			return api.Event{Topic: api.TopicJob, Type: "JobDeregistered", Key: "hidden", Index: i, Payload: map[string]any{"Job": []int{7}}}
		},
		"allocation": func(_ *fakeNomad, i uint64) api.Event {
			return api.Event{Topic: api.TopicAllocation, Type: "AllocationUpdated", Key: "x", Index: i, Payload: map[string]any{"Allocation": 3}}
		},
		"node": func(f *fakeNomad, i uint64) api.Event {
			f.nodeErr = errors.New("connection refused")
			return api.Event{Topic: api.TopicNode, Type: "NodeRegistration", Key: "node-1", Index: i}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			w := startWatch(t, f, config.Default())
			fs := w.next()
			must.Eq(t, 1, fs.from)

			f.put(gated("hidden", 10)) // what the unreadable event said
			e := bad(f, f.index)
			select {
			case fs.ch <- &api.Events{Index: e.Index, Events: []api.Event{e}}:
			case <-time.After(wait):
				t.Fatal("the watch stopped reading the event stream")
			}
			again := w.next()
			must.Eq(t, 2, again.from)
			must.NotNil(t, w.job("default/hidden"))

			// the stream resumes below it: skipped, no second relist
			w.send(again, &api.Events{Index: e.Index, Events: []api.Event{e}})
			w.quiet()
		})
	}
}

// A stream Nomad closes cleanly may have lost events: the watch lists the
// cluster again before it resumes.
func TestWatchRelistsAfterACleanClose(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("a", 10))
	w := startWatch(t, f, config.Default())
	fs := w.next()
	w.send(fs, jobEvent(t, f.jobs["a"]))

	f.put(gated("unseen", 10)) // no event for it reaches the watch
	close(fs.ch)
	again := w.next()
	must.NotNil(t, w.job("default/unseen"))
	must.Eq(t, f.index+1, again.from)
}

// A listing older than the events applied (a lagging server) rolls back
// no job, allocation or node, brings back no purged job, and keeps a job
// registered after the listing's snapshot.
func TestWatchRelistOlderThanEventsDoesNotRollBack(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("a", 10))
	f.put(gated("purged", 10))
	f.allocs = []*api.Allocation{{ID: "al", Namespace: "default", JobID: "a", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: 2}}
	f.nodes[0].ModifyIndex = 1
	// the cluster as the lagging server will list it, at index 2
	stale := &fakeNomad{index: f.index, jobs: map[string]*api.Job{"a": f.jobs["a"], "purged": f.jobs["purged"]}}
	staleNode := *f.nodes[0]

	w := startWatch(t, f, config.Default())
	fs := w.next()
	must.Eq(t, 3, fs.from)

	a := withMeta(f.jobs["a"], "v", "new")
	a.ModifyIndex = ptr(uint64(10))
	al := *f.allocs[0]
	al.ClientStatus, al.ModifyIndex = "complete", 11
	drained := staleNode
	drained.Drain, drained.ModifyIndex = true, 12
	f.nodes = []*api.Node{&drained}
	fresh := gated("fresh", 10)
	fresh.ModifyIndex = ptr(uint64(13))
	purge := &api.Events{Index: 14, Events: []api.Event{{Topic: api.TopicJob, Type: "JobDeregistered", Key: "purged", Index: 14,
		Payload: map[string]any{"Job": payload(t, "Job", f.jobs["purged"])["Job"], "Deleted": true}}}}
	w.send(fs, jobEvent(t, a), allocEvent(t, &al),
		&api.Events{Index: 12, Events: []api.Event{{Topic: api.TopicNode, Type: "NodeDrain", Key: "node-1", Index: 12}}},
		jobEvent(t, fresh), purge)
	must.True(t, w.node("node-1").Drain)
	must.Nil(t, w.job("default/purged"))

	// the stream ends; the next listing comes from a server still at index 2
	f.nodes, f.jobs, f.index = []*api.Node{&staleNode}, stale.jobs, stale.index
	close(fs.ch)
	again := w.next()
	must.Eq(t, 3, again.from)
	must.Eq(t, "new", w.job("default/a").Meta["v"])
	must.Eq(t, "complete", w.alloc("al").ClientStatus)
	must.True(t, w.node("node-1").Drain)
	must.NotNil(t, w.job("default/fresh"))
	must.Nil(t, w.job("default/purged"))
}

// A job or allocation from an event keeps every field the HTTP API would
// give (api's own decoding drops MemoryMB, whose mapstructure tag is
// "memory"): a pin registers the job again, and a job without its memory
// request would get Nomad's default 300 MiB.
func TestEventPayloadsKeepEveryField(t *testing.T) {
	job := gated("big-memory", 25)
	job.TaskGroups[0].Tasks[0].Resources.MemoryMB = ptr(16384)
	job.TaskGroups[0].Tasks[0].Resources.MemoryMaxMB = ptr(32768)
	job.SubmitTime = ptr(int64(1763910123456789000))
	b, err := json.Marshal(map[string]any{"Job": job})
	must.NoError(t, err)
	var payload map[string]any
	must.NoError(t, json.Unmarshal(b, &payload))
	e := api.Event{Topic: api.TopicJob, Type: "JobRegistered", Payload: payload}
	lossy, err := e.Job()
	must.NoError(t, err)
	must.Nil(t, lossy.TaskGroups[0].Tasks[0].Resources.MemoryMB) // why eventJob exists
	got, _, err := eventJob(e)
	must.NoError(t, err)
	must.Eq(t, 16384, *got.TaskGroups[0].Tasks[0].Resources.MemoryMB)
	must.Eq(t, 32768, *got.TaskGroups[0].Tasks[0].Resources.MemoryMaxMB)
	must.Eq(t, "big-memory", *got.ID)
}

// The watcher alone: a listing fills the model, marks it synced and says
// it changed; nothing else is needed to run it.
func TestWatcherAloneListsIntoTheModel(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("a", 25))
	changed := 0
	w := &watcher{cluster: &cluster{state: model.New()}, log: hclog.NewNullLogger(), nomad: f, metrics: newMetrics(),
		ns: managedNamespaces(nil), changed: func() { changed++ }}
	must.False(t, w.synced)
	must.NoError(t, w.resync(t.Context()))
	must.True(t, w.synced)
	must.Eq(t, 1, changed)
	must.MapLen(t, 1, w.state.Nodes)
	must.MapContainsKey(t, w.state.Jobs, model.JobKey("default", "a"))
}
