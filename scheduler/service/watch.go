package service

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// watcher keeps the model current from Nomad (watch, relist). It owns the
// model: only it writes it from Nomad.
type watcher struct {
	*cluster
	log     hclog.Logger
	nomad   eventSource
	metrics *metrics
	ns      namespaces
	// interval is how long the stream is read before the cluster is
	// listed again (resync_interval).
	interval time.Duration
	// changed says the model changed: the loop should decide again.
	changed func()
}

// eventSource is the part of Nomad the watcher reads.
type eventSource interface {
	NodeList(ctx context.Context) ([]*api.NodeListStub, uint64, error)
	Node(ctx context.Context, id string) (*api.Node, error)
	JobList(ctx context.Context, namespace string) ([]*api.JobListStub, uint64, error)
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	Allocs(ctx context.Context, namespace string) ([]*api.Allocation, uint64, error)
	Alloc(ctx context.Context, id string) (*api.Allocation, error)
	FailedEvals(ctx context.Context, namespace string) ([]*api.Evaluation, error)
	Stream(ctx context.Context, index uint64, namespace string) (<-chan *api.Events, error)
	Namespaces(ctx context.Context, index uint64) ([]string, uint64, error)
}

var _ eventSource = nomadClient{}

// cluster is the live model of the cluster and the service's one lock.
// The watcher owns it and alone writes the model from Nomad; the decision
// loop, the records and the API read it under mu. mu also guards the
// loop's and the records' own fields, so that a pass reads the model and
// its notes in one critical section (and the trust and feasibility hooks
// the model calls run under it).
type cluster struct {
	mu    timedMutex
	state *model.State
	// synced is set once the model holds a full listing: no pass decides
	// before.
	synced bool
	// holds are the hold jobs of staged placements (hold.go), kept out of
	// the model: the shares they hold are their groups'. Only jobs that
	// verifyHold takes for the scheduler's own are (hold_watch.go);
	// holdJobs are their keys, stopped ones too, whose allocations stay
	// out of the model.
	holds      holdBook
	holdJobs   map[string]uint64 // -> the modify index judged
	verifyHold func(*api.Job) bool
	// relistNow asks the watcher for a listing beside the stream.
	relistNow chan struct{}
	// readPhase lets a pass read the model without mu (reading.go).
	readPhase
	// gateWatch are the nodes that open the gate (gateopen.go).
	gateWatch
}

// watch keeps the model current: a full listing merged into the model,
// then the event stream from the listing's lowest index + 1 (nodes, jobs
// and allocations are listed one after the other: an event between two
// listings must not be skipped; replaying one the listings already show
// is harmless). Whenever the stream ends (an error, a clean close, an
// event that cannot be read) the cluster is listed again before the
// stream resumes; every resync_interval it is listed beside the stream,
// whose events keep being applied. Only this goroutine updates the
// model from Nomad, and a relist merges (model.State.Relist): a listing
// older than the events applied never rolls the model back.
func (w *watcher) watch(ctx context.Context) {
	interval := w.interval
	ns := w.ns
	var backoff time.Duration
	// bad is the last event that could not be read; covered is the last
	// such event a completed relist came after, so a replay skips it
	// instead of relisting again and again.
	var bad, covered uint64
	for ctx.Err() == nil {
		if backoff > 0 {
			sleep(ctx, backoff)
		}
		index, err := w.relist(ctx, ns)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = nextBackoff(backoff)
			w.log.Warn("cannot list the cluster from nomad; retrying", "error", err, "retry_in", backoff)
			continue
		}
		covered = max(covered, bad)
		// the stream covers the namespaces of when it opens: one created
		// later ends it (watch_namespaces.go)
		known, nsIndex, watchNS := w.streamNamespaces(ctx)
		streamCtx, cancel := context.WithCancel(ctx)
		ch, err := w.nomad.Stream(streamCtx, index+1, ns.stream())
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return
			}
			w.metrics.reconnects.Inc()
			backoff = nextBackoff(backoff)
			w.log.Warn("event stream unavailable; will list the cluster again", "error", err, "retry_in", backoff)
			continue
		}
		w.log.Debug("event stream open", "from_index", index+1, "namespace", ns.stream())
		var created <-chan string
		if watchNS {
			created = w.newNamespace(streamCtx, known, nsIndex)
		}
		progressed, unread := w.consume(streamCtx, ch, created, interval, ns, covered)
		cancel()
		bad = max(bad, unread)
		if ctx.Err() != nil {
			return
		}
		w.metrics.reconnects.Inc()
		if progressed {
			backoff = 0
		} else {
			backoff = nextBackoff(backoff)
		}
	}
}

// nextBackoff waits 250ms after the first failure in a row, doubling up
// to 10s.
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, 250*time.Millisecond), 10*time.Second)
}

// consume applies events until the stream ends, or a namespace the
// stream does not cover is created, after which the cluster is listed
// again. Every interval the cluster is listed meanwhile, while
// events keep being applied (the listing merges under the newer events:
// model.State.Relist). It reports whether the stream delivered anything
// (if not, the caller backs off) and the index of an event it could not
// read. Unreadable events at or below covered were seen before a relist
// and are skipped.
func (w *watcher) consume(ctx context.Context, ch <-chan *api.Events, created <-chan string, interval time.Duration, ns namespaces, covered uint64) (progressed bool, unread uint64) {
	deadline := time.NewTimer(interval)
	defer deadline.Stop()
	var relisted chan error // non-nil while a periodic listing runs
	defer func() {
		if relisted != nil {
			<-relisted // no listing outlives the stream it ran beside
		}
	}()
	relist := func() {
		relisted = make(chan error, 1)
		go func() {
			_, err := w.relist(ctx, ns)
			relisted <- err
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return progressed, 0
		case name := <-created:
			w.log.Info("a namespace was created after the event stream opened, which does not cover it: listing the cluster again and opening the stream again", "namespace", name)
			return true, 0
		case <-deadline.C:
			w.log.Debug("periodic full listing, beside the event stream", "interval", interval)
			relist()
		case <-w.relistWanted(relisted):
			w.log.Debug("full listing asked for, beside the event stream")
			deadline.Stop()
			relist()
		case err := <-relisted:
			relisted = nil
			if err != nil {
				if ctx.Err() != nil {
					return progressed, 0
				}
				w.log.Warn("periodic listing failed; listing again before the stream resumes", "error", err)
				return true, 0
			}
			deadline.Reset(interval)
		case evs, ok := <-ch:
			if !ok {
				w.log.Info("event stream closed; listing the cluster again before resuming")
				return progressed, 0
			}
			if evs.Err != nil {
				w.log.Warn("event stream ended; listing the cluster again before resuming", "error", evs.Err)
				return progressed, 0
			}
			progressed = true
			if evs.IsHeartbeat() {
				continue
			}
			if e, err := w.apply(ctx, evs, ns, covered); err != nil {
				w.log.Warn("cannot read an event; listing the cluster again instead", "error", err,
					"topic", e.Topic, "type", e.Type, "key", e.Key, "index", e.Index)
				return true, e.Index
			}
		}
	}
}

// apply applies a batch of events. On an event it cannot read it stops,
// without advancing the model's index, and returns that event.
func (w *watcher) apply(ctx context.Context, evs *api.Events, ns namespaces, covered uint64) (api.Event, error) {
	for _, e := range evs.Events {
		w.log.Trace("event", "topic", e.Topic, "type", e.Type, "key", e.Key, "index", e.Index)
		var err error
		switch e.Topic {
		case api.TopicJob:
			err = w.applyJob(e, ns)
		case api.TopicAllocation:
			err = w.applyAlloc(ctx, e, ns)
		case api.TopicNode:
			err = w.applyNode(ctx, e)
		case api.TopicEvaluation:
			err = w.applyEval(e, ns)
		}
		if err != nil && e.Index <= covered {
			w.log.Debug("skipping an unreadable event a relist already covers", "error", err, "index", e.Index)
			continue
		}
		if err != nil {
			w.metrics.events.Add(float64(len(evs.Events)))
			w.changed()
			return e, err
		}
	}
	w.mu.Lock()
	w.write(func() {
		if evs.Index > w.state.Index {
			w.state.Index = evs.Index
		}
	})
	w.mu.Unlock()
	w.metrics.events.Add(float64(len(evs.Events)))
	w.changed()
	return api.Event{}, nil
}

func (w *watcher) applyJob(e api.Event, ns namespaces) error {
	if e.Type == "JobDeregistered" {
		job, purged, err := eventJob(e)
		if err != nil {
			return fmt.Errorf("decode the deregistered job %s: %w", e.Key, err)
		}
		if job == nil || job.ID == nil {
			return fmt.Errorf("job deregistration %s carries no job", e.Key)
		}
		if why := malformed(job); why != "" {
			return fmt.Errorf("job deregistration %s: %s", e.Key, why)
		}
		if !ns.has(nsOf(job)) {
			return nil
		}
		w.mu.Lock()
		w.write(func() {
			switch {
			case w.isOwnHold(job): // a hold let go: its shares are free
				delete(w.holds, model.JobKey(nsOf(job), *job.ID))
			case purged:
				w.state.DeleteJobAt(nsOf(job), *job.ID, e.Index)
			default:
				w.state.PutJob(job)
			}
		})
		w.mu.Unlock()
		return nil
	}
	job, _, err := eventJob(e)
	if err != nil {
		return fmt.Errorf("decode job %s: %w", e.Key, err)
	}
	if job == nil || job.ID == nil {
		return fmt.Errorf("job event %s carries no job", e.Key)
	}
	if why := malformed(job); why != "" {
		return fmt.Errorf("job event %s: %s", e.Key, why)
	}
	if !ns.has(nsOf(job)) {
		return nil
	}
	w.mu.Lock()
	w.write(func() { w.putJob(job) })
	w.mu.Unlock()
	return nil
}

// malformed says what of a job the model cannot read: a nil or unnamed
// group, a nil task, device or constraint. Nomad sends no such job; an
// event payload that decodes to one is refused, not modelled.
func malformed(job *api.Job) string {
	if slices.Contains(job.Constraints, nil) {
		return "a nil constraint"
	}
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil {
			return "a group without a name"
		}
		if slices.Contains(tg.Constraints, nil) || slices.Contains(tg.Tasks, nil) {
			return fmt.Sprintf("group %q has a nil constraint or task", *tg.Name)
		}
		for _, t := range tg.Tasks {
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				if d == nil || slices.Contains(d.Constraints, nil) {
					return fmt.Sprintf("task %q has a nil device or device constraint", t.Name)
				}
			}
		}
	}
	return ""
}

// applyEval records what Nomad said when it evaluated a job of a managed
// namespace: the groups it could not place at that version (model.PutEval).
func (w *watcher) applyEval(e api.Event, ns namespaces) error {
	var ev *api.Evaluation
	if err := fromPayload(e, "Evaluation", &ev); err != nil {
		return fmt.Errorf("decode evaluation %s: %w", e.Key, err)
	}
	if ev == nil || !ns.has(ev.Namespace) {
		return nil
	}
	w.mu.Lock()
	w.write(func() { w.state.PutEval(ev) })
	w.mu.Unlock()
	return nil
}

func (w *watcher) applyAlloc(ctx context.Context, e api.Event, ns namespaces) error {
	a, err := eventAlloc(e)
	if err != nil {
		return fmt.Errorf("decode allocation %s: %w", e.Key, err)
	}
	if a == nil || a.ID == "" {
		return fmt.Errorf("allocation event %s carries no allocation", e.Key)
	}
	// allocations of every namespace: the shares they hold are not free
	w.mu.Lock()
	hold, known := w.holdAlloc(a), w.state.HasResources(a.ID)
	w.mu.Unlock()
	if hold {
		return nil // a hold's shares are its group's (hold.go)
	}
	if !known && model.Live(a) && a.AllocatedResources == nil {
		// an event that does not carry what the allocation holds (Nomad's
		// carry it): read it once in full, or its shares would look free
		full, err := w.nomad.Alloc(ctx, a.ID)
		switch {
		case err == nil:
			a.AllocatedResources = full.AllocatedResources
		case !isNotFound(err): // gone since: nothing to miss
			return fmt.Errorf("read allocation %s: %w", a.ID, err)
		}
	}
	w.mu.Lock()
	w.write(func() {
		if !w.holdAlloc(a) {
			w.state.PutAlloc(a)
		}
	})
	w.mu.Unlock()
	return nil
}

func (w *watcher) applyNode(ctx context.Context, e api.Event) error {
	if e.Type == "NodeDeregistration" {
		w.mu.Lock()
		w.write(func() {
			w.state.DeleteNodeAt(e.Key, e.Index)
			w.checkGate(e.Key, w.state.Nodes[e.Key])
		})
		w.mu.Unlock()
		return nil
	}
	n, err := w.nomad.Node(ctx, e.Key)
	switch {
	case isNotFound(err):
		// deregistered since: its deregistration event follows
		w.log.Debug("node of an event is gone", "node_id", e.Key, "index", e.Index)
		return nil
	case err != nil:
		return fmt.Errorf("read node %s: %w", e.Key, err)
	}
	w.mu.Lock()
	w.write(func() {
		w.state.PutNode(n)
		w.checkGate(n.ID, w.state.Nodes[n.ID])
	})
	w.mu.Unlock()
	return nil
}

// resync lists the cluster and merges the listing into the model.
func (w *watcher) resync(ctx context.Context) error {
	_, err := w.relist(ctx, w.ns)
	return err
}

// relist lists the cluster (jobs and allocations of the managed
// namespaces), merges the listing into the model and returns the index
// the event stream resumes after: the lowest of the listings'. Only the
// nodes and jobs whose modify index differs from the model's are read in
// full (one request each): a relist of an unchanged cluster costs its
// list requests.
func (w *watcher) relist(ctx context.Context, ns namespaces) (uint64, error) {
	l := &model.Listing{}
	nodes, index, err := w.nomad.NodeList(ctx)
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	l.NodesIndex = index
	w.mu.Lock()
	var read []string
	for _, st := range nodes {
		if n := w.state.Nodes[st.ID]; n != nil && n.ModifyIndex == st.ModifyIndex {
			l.SameNodes = append(l.SameNodes, st.ID)
		} else {
			read = append(read, st.ID)
		}
	}
	w.mu.Unlock()
	for _, id := range read {
		n, err := w.nomad.Node(ctx, id)
		switch {
		case isNotFound(err):
			continue // gone since: the listing's index covers it
		case err != nil:
			return 0, fmt.Errorf("read node %s: %w", id, err)
		}
		l.Nodes = append(l.Nodes, n)
	}
	var holdStubs []*api.JobListStub // read in full, holds or not (hold_watch.go)
	for i, name := range ns.list() {
		stubs, index, err := w.nomad.JobList(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("list the jobs of namespace %q: %w", name, err)
		}
		if i == 0 || index < l.JobsIndex {
			l.JobsIndex = index
		}
		var changed []*api.JobListStub
		w.mu.Lock()
		for _, st := range stubs {
			if !ns.has(st.Namespace) {
				continue
			}
			if isHold(st.ID) {
				holdStubs = append(holdStubs, st)
				continue
			}
			k := model.JobKey(st.Namespace, st.ID)
			if j := w.state.Jobs[k]; j != nil && !w.state.OwnJob(k) && j.ModifyIndex != nil && *j.ModifyIndex == st.ModifyIndex &&
				j.JobModifyIndex != nil && *j.JobModifyIndex == st.JobModifyIndex {
				l.SameJobs = append(l.SameJobs, k)
			} else {
				changed = append(changed, st)
			}
		}
		w.mu.Unlock()
		for _, st := range changed {
			j, err := w.nomad.Job(ctx, st.Namespace, st.ID)
			switch {
			case isNotFound(err):
				continue
			case err != nil:
				return 0, fmt.Errorf("read job %s: %w", st.ID, err)
			}
			l.Jobs = append(l.Jobs, j)
		}
	}
	holdNamed, err := w.readHolds(ctx, holdStubs)
	if err != nil {
		return 0, err
	}
	// the allocations of every namespace: the shares they hold are not
	// free (but a hold's, which are its group's)
	if l.Allocs, l.AllocsIndex, err = w.nomad.Allocs(ctx, "*"); err != nil {
		return 0, fmt.Errorf("list the allocations: %w", err)
	}
	// what Nomad said of the groups it could not place: a pin it failed
	// before this replica started is noticed too (model.PutEval)
	var evals []*api.Evaluation
	for _, name := range ns.list() {
		got, err := w.nomad.FailedEvals(ctx, name)
		if err != nil {
			w.log.Warn("cannot list Nomad's failed evaluations; pins Nomad could not place are noticed at its next evaluation", "namespace", name, "error", err)
			continue
		}
		evals = append(evals, got...)
	}
	slices.SortFunc(evals, func(a, b *api.Evaluation) int { return cmp.Compare(a.ModifyIndex, b.ModifyIndex) })
	w.mu.Lock()
	w.waitRead() // a whole listing merged, and what it kept reported, after the pass's read
	prev := w.state.Index
	holds, others := w.splitHolds(holdNamed, l.JobsIndex) // judged with the key of now
	l.Jobs = append(l.Jobs, others...)
	l.Allocs = slices.DeleteFunc(l.Allocs, w.holdAlloc)
	st := w.state.Relist(l)
	w.checkGates()
	w.setHolds(holds)
	for _, e := range evals {
		if ns.has(e.Namespace) {
			w.state.PutEval(e)
		}
	}
	w.synced = true
	w.mu.Unlock()
	w.metrics.resyncs.Inc()
	w.log.Info("listed the cluster", "nodes", len(l.Nodes)+len(l.SameNodes), "jobs", len(l.Jobs)+len(l.SameJobs), "read", len(l.Nodes)+len(l.Jobs), "allocations", len(l.Allocs),
		"index", l.Index(), "previous_index", prev, "kept_newer", st.Kept, "removed", st.Removed, "namespaces", ns.String())
	w.changed()
	return l.Index(), nil
}

// eventJob decodes an event's job as the HTTP API's JSON would be. The
// api package decodes payloads with mapstructure, whose tags (memory,
// memory_max, cores, ...) do not match the payload's keys (MemoryMB, ...):
// such a job has lost its memory request, and a pin that registered it
// again would silently give every task Nomad's default 300 MiB.
func eventJob(e api.Event) (*api.Job, bool, error) {
	var job *api.Job
	if err := fromPayload(e, "Job", &job); err != nil {
		return nil, false, err
	}
	deleted, _ := e.Payload["Deleted"].(bool)
	return job, deleted, nil
}

// eventAlloc decodes an event's allocation as eventJob does its job.
func eventAlloc(e api.Event) (*api.Allocation, error) {
	var a *api.Allocation
	return a, fromPayload(e, "Allocation", &a)
}

func fromPayload(e api.Event, key string, out any) error {
	raw, ok := e.Payload[key]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("%s payload: %w", key, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s payload: %w", key, err)
	}
	return nil
}
