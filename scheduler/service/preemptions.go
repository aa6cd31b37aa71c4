package service

import (
	"net/http"
	"slices"
	"strings"
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
func (s *Service) notePreempted(k decide.Key, ids []string, forKey decide.Key) {
	s.preemptions = last(append(s.preemptions, Preemption{Namespace: k.Namespace, Job: k.Job, Group: k.Group,
		Allocations: slices.Clone(ids), At: s.now(), For: forKey.String(), forNamespace: forKey.Namespace}), maxPreemptions)
}

// preemptionsFor lists the recent preemptions the caller may see, newest
// first: those of namespaces it may read, the group they were for named
// only when it may read that one's namespace too.
func (s *Service) preemptionsFor(see *visibility) []Preemption {
	s.mu.Lock()
	all := slices.Clone(s.preemptions)
	s.mu.Unlock()
	out := make([]Preemption, 0, len(all))
	for _, p := range slices.Backward(all) {
		if !see.can(p.Namespace) {
			continue
		}
		if !see.can(p.forNamespace) {
			p.For = ""
		}
		out = append(out, p)
	}
	return out
}

// handlePreemptions lists the groups last preempted, newest first, in the
// namespaces the caller may read.
func (s *Service) handlePreemptions(w http.ResponseWriter, r *http.Request) {
	if err := s.authorize(r, authScope{}); err != nil { // nothing listed before authentication
		authFailed(w, err)
		return
	}
	see := s.visibility(r)
	out := s.preemptionsFor(see)
	if see.err != nil {
		authFailed(w, see.err)
		return
	}
	slices.SortStableFunc(out, func(a, b Preemption) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(a.Job, b.Job)
	})
	writeJSON(w, http.StatusOK, out)
}
