package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// What the loop keeps of the allocations it stops by gating their group
// again (gateAgain: a preemption, or an unpairing):
//
//   - stopping (loop.preempted): the allocations Nomad is stopping, and
//     since when; their capacity is already given away (the pass's
//     snapshot leaves them out) until they are gone or stoppingFor has
//     passed. Saved in the records; a follower takes the leader's.
//     Guarded by the model's lock (cluster.mu);
//   - preemptionLog (loop.preemptions): the groups last preempted, for
//     /v1/preemptions and the page, in memory only (a new leader starts
//     with none). It locks itself.

// maxPreemptions bounds the preemptions kept for /v1/preemptions and the
// page.
const maxPreemptions = 50

// Preemption is one group's allocations stopped, and the group gated
// again, so that a guaranteed group could have their capacity.
type Preemption struct {
	Namespace   string    `json:"namespace"`
	Job         string    `json:"job"`
	Group       string    `json:"group"`
	Allocations []string  `json:"allocations"`
	At          time.Time `json:"at"`
	// For is the guaranteed group, "<namespace>/<job>/<group>"; empty when
	// the caller may not read its namespace.
	For          string `json:"for,omitempty"`
	forNamespace string
}

// stoppingFor is how long an allocation gated away counts as stopping at
// most: one Nomad has not stopped by then holds its capacity again.
const stoppingFor = 10 * time.Minute

// stopping are allocations being stopped, by ID, and since when.
type stopping map[string]time.Time

// has reports whether allocation id is being stopped.
func (st stopping) has(id string) bool {
	_, ok := st[id]
	return ok
}

// stop notes allocations stopped at at.
func (st stopping) stop(ids []string, at time.Time) {
	for _, id := range ids {
		st[id] = at
	}
}

// expire forgets the allocations state no longer has live, and those
// stopped more than stoppingFor before now.
func (st stopping) expire(state *model.State, now time.Time) {
	for id, at := range st {
		if a, ok := state.Allocs[id]; !ok || !model.Live(a) || now.Sub(at) > stoppingFor {
			delete(st, id)
		}
	}
}

// merge is the leader's (read), with the times of those this replica
// stopped itself.
func (st stopping) merge(read stopping) stopping {
	for id := range read {
		if at, ok := st[id]; ok {
			read[id] = at
		}
	}
	return read
}

// preemptionLog is the groups last preempted, newest last.
type preemptionLog struct {
	mu   sync.Mutex
	last []Preemption
}

// note logs group k's allocations ids preempted at at for group forKey.
func (l *preemptionLog) note(k decide.Key, ids []string, forKey decide.Key, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = last(append(l.last, Preemption{Namespace: k.Namespace, Job: k.Job, Group: k.Group,
		Allocations: slices.Clone(ids), At: at, For: forKey.String(), forNamespace: forKey.Namespace}), maxPreemptions)
}

// recent lists the groups last preempted, oldest first.
func (l *preemptionLog) recent() []Preemption {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.last)
}

// preempt stops opportunistic allocations by gating their groups again:
// Nomad replaces the allocations, and the replacements wait at the gate
// until capacity frees.
func (s *loop) preempt(ctx context.Context, allocIDs []string, forKey decide.Key) error {
	return s.gate.gateAgain(ctx, allocIDs, func(t decide.Key, ids []string) {
		s.metrics.preemptions.Add(float64(len(ids)))
		s.preemptions.note(t, ids, forKey, s.now())
		s.log.Warn("preempted opportunistic allocations for a guaranteed job; their group waits at the gate again",
			"job_id", t.Job, "group", t.Group, "allocations", ids, "for", forKey.String())
	})
}

// errNotManaged is wrapped by the refusal to stop or gate an allocation
// of a namespace the scheduler does not manage.
var errNotManaged = errors.New("namespace not managed by this scheduler")

// gater stops allocations by gating their groups again (preempt,
// unpair): it registers each group unpinned, so that Nomad stops its
// allocations and their replacements wait at the gate, and stops the
// allocations. It keeps nothing: the allocations it stopped go into the
// loop's stopping set (stopped, under the model's lock), whose capacity
// the next passes count free.
type gater struct {
	c       *cluster
	nomad   gateNomad
	records submitKeeper
	lease   writeGate
	stopped *stopping
	managed namespaces
	now     func() time.Time
	timeout time.Duration
}

// gateNomad is what gating again asks of Nomad.
type gateNomad interface {
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	Register(ctx context.Context, job *api.Job, index uint64) (uint64, error)
	StopAlloc(ctx context.Context, id string) error
}

// submitKeeper keeps a job's place in the queue across the scheduler's
// registration (submit.go). The caller holds the model's lock.
type submitKeeper interface {
	keepSubmit(job *api.Job, from, to uint64)
}

var (
	_ gateNomad    = nomadClient{}
	_ submitKeeper = (*records)(nil)
)

// gateAgain stops allocations by gating their groups again: Nomad stops
// them, and their replacements wait at the gate to be placed again. done,
// when set, hears of each group gated again with its allocations stopped.
// Namespaces are walls: it acts on none of them when one belongs to a
// namespace the scheduler does not manage.
func (g *gater) gateAgain(ctx context.Context, allocIDs []string, done func(t decide.Key, ids []string)) error {
	targets := map[decide.Key][]string{}
	g.c.mu.Lock()
	for _, id := range allocIDs {
		if a, ok := g.c.state.Allocs[id]; ok {
			if !g.c.state.Manages(a.Namespace) {
				g.c.mu.Unlock()
				return fmt.Errorf("%w: allocation %s is of namespace %s; it manages %s", errNotManaged, id, model.AllocKey(a).Namespace, g.managed)
			}
			targets[model.AllocKey(a)] = append(targets[model.AllocKey(a)], id)
		}
	}
	g.c.mu.Unlock()
	// each request has its own timeout: a slow one does not use up the
	// time of those after it
	for _, t := range slices.SortedFunc(maps.Keys(targets), decide.Key.Compare) {
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		job, err := g.nomad.Job(rctx, t.Namespace, t.Job)
		cancel()
		if err != nil {
			return fmt.Errorf("reading job %s: %w", t.Job, err)
		}
		index := *job.JobModifyIndex
		pin.Unpin(job, t.Group)
		if err := g.lease.mayWrite(); err != nil {
			return err
		}
		rctx, cancel = context.WithTimeout(ctx, g.timeout)
		registered, err := g.nomad.Register(rctx, job, index)
		cancel()
		if err != nil {
			return fmt.Errorf("gating %s/%s again: %w", t.Job, t.Group, err)
		}
		g.c.mu.Lock()
		g.records.keepSubmit(job, index, registered) // it keeps its place in the queue
		g.c.mu.Unlock()
		for _, id := range targets[t] {
			if err := g.lease.mayWrite(); err != nil {
				return err
			}
			rctx, cancel := context.WithTimeout(ctx, g.timeout)
			err := g.nomad.StopAlloc(rctx, id)
			cancel()
			if err != nil && !isNotFound(err) {
				return fmt.Errorf("stopping allocation %s of %s/%s: %w", id, t.Job, t.Group, err)
			}
		}
		g.c.mu.Lock()
		g.stopped.stop(targets[t], g.now()) // its capacity is free for this pass on
		g.c.mu.Unlock()
		if done != nil {
			done(t, targets[t])
		}
	}
	return nil
}

// queuePos is a waiting group's place in the queue.
type queuePos struct{ Position, Of int }
