package service

import (
	"context"

	"github.com/gpushare/gpushare/scheduler/decide"
)

// priorUnread reports whether the pin of the version a gated group's
// running allocation alloc was placed with is still to be read: the state
// remembers the pins of versions it saw replaced, but a scheduler that
// started while the group was gated again never saw its pinned version.
// The caller holds s.mu; readPriors reads what this returns true for
// (the question is noted through out.shared).
func (s *loop) priorUnread(k decide.Key, alloc string, out *collected) bool {
	if _, ok := s.state.Prior(k); ok {
		return false
	}
	read, asked := s.priorRead[alloc]
	if !asked {
		out.shared(func() {
			if s.priorRead == nil {
				s.priorRead = map[string]bool{}
			}
			s.priorRead[alloc] = false
		})
	}
	return !read
}

// readPriors reads, once per allocation, the job version that each
// allocation priorUnread asked about runs, and remembers the pin it
// carries (model.State.LearnPrior). An allocation whose read fails, or
// whose version carries no pin of this scheduler, is asked about no more:
// its group is decided as any gated group.
func (s *loop) readPriors(ctx context.Context) {
	s.mu.Lock()
	var ids []string
	for id, read := range s.priorRead {
		if !read {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := s.request(ctx)
		a, err := s.nomad.Alloc(rctx, id)
		cancel()
		s.mu.Lock()
		s.priorRead[id] = true
		if err == nil && a.Job != nil {
			learned := s.state.LearnPrior(a.Job, a.TaskGroup)
			s.log.Debug("read the pin of a running allocation's version", "alloc_id", id, "job_id", a.JobID, "group", a.TaskGroup, "pinned", learned)
		} else if err != nil {
			s.log.Warn("cannot read a running allocation's version; its group is decided anew", "alloc_id", id, "error", err)
		}
		s.mu.Unlock()
	}
	if len(ids) > 0 {
		s.markDirty()
	}
}
