package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
)

// maxPreemptions bounds the preemptions kept for /v1/preemptions and the
// page.
const maxPreemptions = 50

// queuePos is a waiting group's place in the queue.
type queuePos struct{ Position, Of int }

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

// notePreempted records a preemption. The caller holds s.mu.
func (s *loop) notePreempted(k decide.Key, ids []string, forKey decide.Key) {
	s.preemptions = last(append(s.preemptions, Preemption{Namespace: k.Namespace, Job: k.Job, Group: k.Group,
		Allocations: slices.Clone(ids), At: s.now(), For: forKey.String(), forNamespace: forKey.Namespace}), maxPreemptions)
}

// errNotManaged is wrapped by the refusal to stop or gate an allocation
// of a namespace the scheduler does not manage.
var errNotManaged = errors.New("namespace not managed by this scheduler")

// gateAgain stops allocations by gating their groups again: Nomad stops
// them, and their replacements wait at the gate to be placed again. done,
// when set, hears of each group gated again with its allocations stopped.
// Namespaces are walls: it acts on none of them when one belongs to a
// namespace the scheduler does not manage.
func (s *loop) gateAgain(ctx context.Context, allocIDs []string, done func(t decide.Key, ids []string)) error {
	targets := map[decide.Key][]string{}
	s.mu.Lock()
	for _, id := range allocIDs {
		if a, ok := s.state.Allocs[id]; ok {
			if !s.state.Manages(a.Namespace) {
				s.mu.Unlock()
				return fmt.Errorf("%w: allocation %s is of namespace %s; it manages %s", errNotManaged, id, model.AllocKey(a).Namespace, s.namespaces())
			}
			targets[model.AllocKey(a)] = append(targets[model.AllocKey(a)], id)
		}
	}
	s.mu.Unlock()
	// each request has its own timeout: a slow one does not use up the
	// time of those after it
	for _, t := range slices.SortedFunc(maps.Keys(targets), decide.Key.Compare) {
		rctx, cancel := s.request(ctx)
		job, err := s.nomad.Job(rctx, t.Namespace, t.Job)
		cancel()
		if err != nil {
			return fmt.Errorf("reading job %s: %w", t.Job, err)
		}
		index := *job.JobModifyIndex
		pin.Unpin(job, t.Group)
		if err := s.lease.mayWrite(); err != nil {
			return err
		}
		rctx, cancel = s.request(ctx)
		registered, err := s.nomad.Register(rctx, job, index)
		cancel()
		if err != nil {
			return fmt.Errorf("gating %s/%s again: %w", t.Job, t.Group, err)
		}
		s.mu.Lock()
		s.records.keepSubmit(job, index, registered) // it keeps its place in the queue
		s.mu.Unlock()
		for _, id := range targets[t] {
			if err := s.lease.mayWrite(); err != nil {
				return err
			}
			rctx, cancel := s.request(ctx)
			err := s.nomad.StopAlloc(rctx, id)
			cancel()
			if err != nil && !isNotFound(err) {
				return fmt.Errorf("stopping allocation %s of %s/%s: %w", id, t.Job, t.Group, err)
			}
		}
		s.mu.Lock()
		for _, id := range targets[t] {
			s.preempted[id] = s.now() // its capacity is free for this pass on
		}
		s.mu.Unlock()
		if done != nil {
			done(t, targets[t])
		}
	}
	return nil
}
