package service

import "sync"

// A pass reads the model without holding cluster.mu (reconcile): it takes
// the lock only to begin its read (beginRead) and to end it (endRead).
// In between no one writes the model, so the pass reads one consistent
// view of it, while the HTTP API, the page and introspection take mu
// and read beside it:
//
//   - what the event stream and the observer change meanwhile is kept,
//     in order, and applied when the read ends (write): the stream is
//     not held up by a pass;
//   - a relist, which merges a whole listing and reports what it kept,
//     waits for the read to end (waitRead);
//   - the pass itself writes, during its read, only what no one else
//     reads (its caches, the model's snapshot), and takes mu for each
//     note the API shows (refusals, placement reasons).
//
// The model's own caches that a read fills (parsed jobs) lock themselves
// (model.State.ForReaders).

// readPhase is the cluster's side of it; its fields are guarded by mu.
type readPhase struct {
	reading  bool
	deferred []func()
	ended    *sync.Cond
}

// write applies fn, a change to the model or the holds, now, or once the
// read under way ends. The caller holds mu.
func (c *cluster) write(fn func()) {
	if c.reading {
		c.deferred = append(c.deferred, fn)
		return
	}
	fn()
}

// beginRead starts a pass's read. The caller holds mu.
func (c *cluster) beginRead() {
	c.state.ForReaders()
	c.reading = true
}

// endRead ends it: what was written meanwhile is applied, in the order it
// came, and a relist waiting goes on. The caller holds mu.
func (c *cluster) endRead() {
	c.reading = false
	for _, fn := range c.deferred {
		fn()
	}
	c.deferred = nil
	if c.ended != nil {
		c.ended.Broadcast()
	}
}

// waitRead waits until no pass reads the model. The caller holds mu,
// which it holds again on return.
func (c *cluster) waitRead() {
	for c.reading {
		if c.ended == nil {
			c.ended = sync.NewCond(&c.mu)
		}
		c.ended.Wait()
	}
}
