package service

import (
	"context"
	"maps"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/hashicorp/nomad/api"
)

// The loop's notes the records save and read (records' notes). The
// caller holds s.mu.

func (s *Service) reasons() (pending map[decide.Key]string, refused map[decide.Key]bool, placed map[decide.Key]string) {
	refused = map[decide.Key]bool{}
	for k := range s.refused {
		refused[k] = true
	}
	return s.pending, refused, s.why
}

func (s *Service) readReasons(pending, placed map[decide.Key]string, refused map[decide.Key]bool) {
	s.pending = pending
	maps.Copy(s.why, placed)
	// what the leader refused for good shows as refused here too; a
	// refusal read so holds nothing (the leader's own are decided with
	// the job and cluster they were made for)
	for k, r := range s.refused {
		if r.read && !refused[k] {
			delete(s.refused, k)
		}
	}
	for k, never := range refused {
		if _, ok := s.refused[k]; never && !ok {
			s.refused[k] = refusal{reason: pending[k], read: true}
		}
	}
}

func (s *Service) preemptedAllocs() map[string]time.Time { return s.preempted }

// readPreempted takes the leader's preemptions; those this replica made
// keep their own time.
func (s *Service) readPreempted(read map[string]time.Time) {
	for id := range read {
		if at, ok := s.preempted[id]; ok {
			read[id] = at
		}
	}
	s.preempted = read
}

func (s *Service) forgetGone(wanted map[string]bool) {
	for id := range s.observations {
		if !wanted[id] {
			delete(s.observations, id)
		}
	}
}

func (s *Service) keyChanged() { clear(s.priorRead) }

// saveState and submitOf are the records' (state.go, submit.go).
func (s *Service) saveState(ctx context.Context) { s.records.saveState(ctx) }

func (s *Service) submitOf(job *api.Job) int64 { return s.records.submitOf(job) }
