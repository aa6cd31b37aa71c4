package service

import (
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
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
