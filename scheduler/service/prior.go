package service

import (
	"context"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
)

// priors are the running allocations whose version's pin the loop asked
// for (false) or read (true): the state remembers the pins of versions it
// saw replaced, but a scheduler that started while a group was gated
// again never saw its pinned version, so that a gated group's unchanged
// allocations are read before it is decided, and keep their place.
//
// Lock: the loop goroutine's own but for the records: a pass's workers
// read it without the model's lock and note a question through
// collected.shared, collect forgets the allocations gone during the
// pass's read, readPriors marks them read under the lock, and the records
// forget them all under it when the signing key changes (keyChanged).
type priors struct {
	asked map[string]bool
}

// unread reports whether the pin of the version a gated group's running
// allocation alloc was placed with is still to be read (st does not know
// group k's prior pin), and notes the question through out.shared the
// first time: readPriors reads it.
func (p *priors) unread(st *model.State, k decide.Key, alloc string, out *collected) bool {
	if _, ok := st.Prior(k); ok {
		return false
	}
	read, asked := p.asked[alloc]
	if !asked {
		out.shared(func() {
			if p.asked == nil {
				p.asked = map[string]bool{}
			}
			p.asked[alloc] = false
		})
	}
	return !read
}

// toRead are the allocations asked about and not read yet. The caller
// holds the model's lock.
func (p *priors) toRead() []string {
	var ids []string
	for id, read := range p.asked {
		if !read {
			ids = append(ids, id)
		}
	}
	return ids
}

// read notes that allocation id's version was read (or could not be):
// it is asked about no more. The caller holds the model's lock.
func (p *priors) read(id string) { p.asked[id] = true }

// forget forgets every question: all are asked again. The caller holds
// the model's lock.
func (p *priors) forget() { clear(p.asked) }

// sweep forgets the allocations st no longer has. The caller is the
// loop's goroutine during a pass's read of st.
func (p *priors) sweep(st *model.State) {
	for id := range p.asked {
		if _, ok := st.Allocs[id]; !ok {
			delete(p.asked, id)
		}
	}
}

// readPriors reads, once per allocation, the job version that each
// allocation priors.unread asked about runs, and remembers the pin it
// carries (model.State.LearnPrior). An allocation whose read fails, or
// whose version carries no pin of this scheduler, is asked about no more:
// its group is decided as any gated group.
func (s *loop) readPriors(ctx context.Context) {
	s.mu.Lock()
	ids := s.priors.toRead()
	s.mu.Unlock()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := s.request(ctx)
		a, err := s.nomad.Alloc(rctx, id)
		cancel()
		s.mu.Lock()
		s.priors.read(id)
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
