package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
)

// churnRun is one run of the job set (gated or ungated) and what was seen
// of it.
type churnRun struct {
	c     *churn
	mode  churnMode
	jobs  []*churnJob
	byID  map[string]*churnJob
	stopq chan churnAct

	start, end, registeredAt time.Time
	pins0                    float64
	stalled                  bool

	mu     sync.Mutex
	allocs map[string]*allocSeen
	// owner is the live allocation of each share held
	owner                        map[string]string
	twice, invalid, failedAllocs []string
	errs                         []string
	created                      []time.Time // each allocation's creation
	lists, events                int
	// restops counts services stopped again after Nomad undid a stop
	restops int
	// the most evaluations Nomad's broker held at once
	broker brokerGauges
}

// allocView is what the run reads of an allocation, from an event of
// Nomad's stream or a stub of its allocations list.
type allocView struct {
	ID, JobID, DesiredStatus, ClientStatus string
	ModifyIndex                            uint64
	CreateTime                             int64
	TaskStates                             map[string]*struct {
		StartedAt time.Time
		Events    []*struct{ Type, DisplayMessage string }
	}
	AllocatedResources *struct {
		Tasks map[string]*struct {
			Devices []*struct{ DeviceIDs []string }
		}
	}
}

func (a *allocView) shares() []string {
	var ids []string
	if a.AllocatedResources != nil {
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				ids = append(ids, d.DeviceIDs...)
			}
		}
	}
	return ids
}

// why is the task's last event that says it failed (or its last event).
func (a *allocView) why() string {
	ts := a.TaskStates["work"]
	if ts == nil || len(ts.Events) == 0 {
		return ""
	}
	ev := ts.Events[len(ts.Events)-1]
	for _, e := range ts.Events {
		if strings.Contains(strings.ToLower(e.Type), "fail") {
			ev = e
		}
	}
	return fmt.Sprintf(": %s: %s", ev.Type, ev.DisplayMessage)
}

// allocSeen is the last seen of an allocation.
type allocSeen struct {
	job     *churnJob
	modify  uint64
	live    bool
	ids     []string
	client  string
	started time.Time
}

// watch follows Nomad's allocations from its event stream (resubscribing
// from the last index after an error) and lists them all every 30s (so an
// event missed is seen all the same). It returns a function that stops
// both.
func (r *churnRun) watch() func() {
	ctx, cancel := context.WithCancel(context.Background())
	_, meta, err := r.c.e.nomad.Jobs().List(nil)
	var index uint64
	if err == nil {
		index = meta.LastIndex
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			ch, err := r.c.e.nomad.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, index, nil)
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for evs := range ch {
				if evs.Err != nil {
					break
				}
				for _, ev := range evs.Events {
					b, err := json.Marshal(ev.Payload["Allocation"])
					var a allocView
					if err == nil && json.Unmarshal(b, &a) == nil && a.ID != "" {
						r.see(&a, true)
					}
				}
				index = evs.Index
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				r.list()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// list reads every allocation with its resources and sees each.
func (r *churnRun) list() {
	var stubs []*allocView
	if _, err := r.c.e.nomad.Raw().Query("/v1/allocations?resources=true", &stubs, nil); err != nil {
		return
	}
	r.mu.Lock()
	r.lists++
	r.mu.Unlock()
	for _, a := range stubs {
		r.see(a, false)
	}
}

// see takes in one look at an allocation: a newer one than the last seen
// moves its shares (checking no live allocation holds one already) and its
// job on.
func (r *churnRun) see(a *allocView, event bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if event {
		r.events++
	}
	j := r.byID[a.JobID]
	if j == nil {
		return
	}
	prev := r.allocs[a.ID]
	if prev != nil && a.ModifyIndex < prev.modify {
		return
	}
	if prev == nil {
		prev = &allocSeen{job: j}
		r.allocs[a.ID] = prev
		j.allocs = append(j.allocs, a.ID)
		r.created = append(r.created, time.Unix(0, a.CreateTime))
	}
	ids := a.shares()
	if len(ids) > 0 && len(prev.ids) == 0 {
		if why := validShares(ids, j.shares, r.c.total); why != "" {
			r.invalid = append(r.invalid, fmt.Sprintf("allocation %s of %s: %s", a.ID, j.id, why))
		}
	}
	if len(ids) == 0 {
		ids = prev.ids
	}
	live := a.DesiredStatus == "run" && (a.ClientStatus == "pending" || a.ClientStatus == "running")
	if prev.live && (!live || !slices.Equal(ids, prev.ids)) {
		for _, id := range prev.ids {
			if r.owner[id] == a.ID {
				delete(r.owner, id)
			}
		}
	}
	if live && (!prev.live || !slices.Equal(ids, prev.ids)) {
		for _, id := range ids {
			if other, ok := r.owner[id]; ok && other != a.ID {
				r.twice = append(r.twice, fmt.Sprintf("share %s in allocations %s and %s of %s (Nomad's index %d)", id, other, a.ID, j.id, a.ModifyIndex))
			}
			r.owner[id] = a.ID
		}
	}
	if a.ClientStatus == "failed" && prev.client != "failed" {
		r.failedAllocs = append(r.failedAllocs, fmt.Sprintf("allocation %s of %s%s", a.ID, j.id, a.why()))
	}
	prev.modify, prev.live, prev.ids, prev.client = a.ModifyIndex, live, ids, a.ClientStatus
	if ts := a.TaskStates["work"]; ts != nil && !ts.StartedAt.IsZero() {
		prev.started = ts.StartedAt
	}
	r.progress(j)
}

// progress moves a job on from what its allocations did: its latency once
// as many as it asks for started; a batch job is done once they all
// completed, a service is due to stop once they all run and done once,
// stopped, none is live; a failed allocation fails its job (rescheduling
// is off). A finished job is stopped if an allocation still lives, then
// purged. The caller holds r.mu.
func (r *churnRun) progress(j *churnJob) {
	if j.purgeQueued {
		return
	}
	running, complete, live, failed := 0, 0, 0, 0
	var last time.Time
	for _, id := range j.allocs {
		a := r.allocs[id]
		switch a.client {
		case "running":
			running++
		case "complete":
			complete++
		case "failed", "lost":
			failed++
		}
		if a.live {
			live++
		}
		if !a.started.IsZero() && (a.client == "running" || a.client == "complete") && a.started.After(last) {
			last = a.started
		}
	}
	if j.latency == 0 && running+complete >= j.count && !last.IsZero() && !j.registered.IsZero() {
		j.latency = max(last.Sub(j.registered), time.Nanosecond)
	}
	if !j.done && !j.failed {
		switch {
		case failed > 0:
			j.failed = true
		case j.batch && complete >= j.count:
			j.done = true
		case !j.batch && j.stopAt.IsZero() && running >= j.count:
			j.stopAt = time.Now().Add(j.run)
		case !j.batch && j.stopped && live == 0:
			j.done = true
		}
	}
	switch {
	case !j.done && !j.failed:
	case live > 0 && !j.stopQueued:
		j.stopQueued = true
		r.stopq <- churnAct{j: j}
	case live == 0:
		j.purgeQueued = true
		r.stopq <- churnAct{j: j, purge: true}
	}
}

// purged forgets the shares of a purged job's allocations: Nomad deleted
// them. The caller holds r.mu.
func (r *churnRun) purged(j *churnJob) {
	for _, id := range j.allocs {
		a := r.allocs[id]
		for _, sh := range a.ids {
			if r.owner[sh] == id {
				delete(r.owner, sh)
			}
		}
		a.live = false
	}
}

// finish lists the allocations once more, so the run's figures hold all
// of them.
func (r *churnRun) finish() { r.list() }

func (r *churnRun) placements() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.created)
}

// gpuShares counts the healthy shares of each GPU of the cluster.
func (c *churn) gpuShares() map[string]int {
	total, _, err := healthyShares(c.e.nomad)
	if err != nil {
		c.e.t.Fatal(err)
	}
	return total
}

// brokerGauges are Nomad's evaluation broker's and blocked evaluations'
// gauges.
type brokerGauges struct{ ready, pending, blocked, escaped int }

// sampleBroker reads the gauges from Nomad's /v1/metrics and keeps the
// most of each.
func (r *churnRun) sampleBroker() brokerGauges {
	b, err := readBroker(r.c.e.nomad)
	if err != nil {
		return b
	}
	r.mu.Lock()
	r.broker.ready = max(r.broker.ready, b.ready)
	r.broker.pending = max(r.broker.pending, b.pending)
	r.broker.blocked = max(r.broker.blocked, b.blocked)
	r.broker.escaped = max(r.broker.escaped, b.escaped)
	r.mu.Unlock()
	return b
}

// readBroker reads the broker's gauges from Nomad's /v1/metrics.
func readBroker(nomad *api.Client) (brokerGauges, error) {
	var m struct {
		Gauges []struct {
			Name  string
			Value float64
		}
	}
	var b brokerGauges
	if _, err := nomad.Raw().Query("/v1/metrics", &m, nil); err != nil {
		return b, err
	}
	for _, g := range m.Gauges {
		switch g.Name {
		case "nomad.nomad.broker.total_ready":
			b.ready = int(g.Value)
		case "nomad.nomad.broker.total_pending":
			b.pending = int(g.Value)
		case "nomad.nomad.blocked_evals.total_blocked":
			b.blocked = int(g.Value)
		case "nomad.nomad.blocked_evals.total_escaped":
			b.escaped = int(g.Value)
		}
	}
	return b, nil
}
