package service

import (
	"context"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// watch keeps the model current: a full listing at start, then the event
// stream from the last index + 1; after a failed reconnect (a Nomad that
// went away may have lost its event buffer) and every resync_interval, a
// full listing again.
func (s *Service) watch(ctx context.Context) {
	resync := true
	backoff := 250 * time.Millisecond
	lastFull := time.Time{}
	interval := config.Duration(s.cfg.ResyncInterval)
	for ctx.Err() == nil {
		if resync || s.now().Sub(lastFull) > interval {
			if err := s.resync(ctx); err != nil {
				s.log.Warn("cannot list the cluster from nomad; retrying", "error", err, "retry_in", backoff)
				sleep(ctx, backoff)
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			resync, lastFull, backoff = false, s.now(), 250*time.Millisecond
		}
		s.mu.Lock()
		from := s.state.Index + 1
		s.mu.Unlock()
		streamCtx, cancel := context.WithCancel(ctx)
		ch, err := s.nomad.Stream(streamCtx, from)
		if err != nil {
			cancel()
			s.metrics.reconnects.Inc()
			s.log.Warn("event stream unavailable; will list the cluster again", "error", err)
			resync = true
			sleep(ctx, backoff)
			continue
		}
		s.log.Debug("event stream open", "from_index", from)
		resync = s.consume(ctx, ch, interval)
		cancel()
		if ctx.Err() == nil {
			s.metrics.reconnects.Inc()
			sleep(ctx, backoff)
		}
	}
}

// consume applies events until the stream ends; it reports whether a full
// listing is needed before resuming.
func (s *Service) consume(ctx context.Context, ch <-chan *api.Events, interval time.Duration) bool {
	deadline := time.NewTimer(interval)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true // periodic full listing
		case evs, ok := <-ch:
			if !ok {
				s.log.Info("event stream closed by nomad; resuming")
				return false
			}
			if evs.Err != nil {
				s.log.Warn("event stream error; resuming after a full listing", "error", evs.Err)
				return true
			}
			if evs.IsHeartbeat() {
				continue
			}
			s.apply(ctx, evs)
		}
	}
}

func (s *Service) apply(ctx context.Context, evs *api.Events) {
	for _, e := range evs.Events {
		s.log.Trace("event", "topic", e.Topic, "type", e.Type, "key", e.Key, "index", e.Index)
		switch e.Topic {
		case api.TopicJob:
			if e.Type == "JobDeregistered" {
				job, purged, err := e.DeregisteredJob()
				if err != nil || job == nil || job.ID == nil {
					// cannot tell which job: list everything again
					s.log.Warn("job deregistration event without a job; relisting", "key", e.Key)
					go s.resyncSoon(ctx)
					continue
				}
				s.mu.Lock()
				if purged {
					s.state.DeleteJob(nsOf(job), *job.ID)
				} else {
					s.state.PutJob(job)
				}
				s.mu.Unlock()
				continue
			}
			if job, err := e.Job(); err == nil && job != nil {
				s.mu.Lock()
				s.state.PutJob(job)
				s.mu.Unlock()
			}
		case api.TopicAllocation:
			a, err := e.Allocation()
			if err != nil || a == nil {
				continue
			}
			s.mu.Lock()
			known := s.state.HasResources(a.ID)
			s.mu.Unlock()
			if !known && model.Live(a) {
				// read the allocation once in full: event payloads may
				// lack its devices
				if full, err := s.nomad.Alloc(ctx, a.ID); err == nil {
					a.AllocatedResources = full.AllocatedResources
				}
			}
			s.mu.Lock()
			s.state.PutAlloc(a)
			s.mu.Unlock()
		case api.TopicNode:
			if e.Type == "NodeDeregistration" {
				s.mu.Lock()
				s.state.DeleteNode(e.Key)
				s.mu.Unlock()
				continue
			}
			if n, err := s.nomad.Node(ctx, e.Key); err == nil {
				s.mu.Lock()
				s.state.PutNode(n)
				s.mu.Unlock()
			}
		}
	}
	s.mu.Lock()
	if evs.Index > s.state.Index {
		s.state.Index = evs.Index
	}
	s.mu.Unlock()
	s.metrics.events.Add(float64(len(evs.Events)))
	s.markDirty()
}

// resync rebuilds the model from a full listing.
func (s *Service) resync(ctx context.Context) error {
	nodes, i1, err := s.nomad.Nodes(ctx)
	if err != nil {
		return err
	}
	jobs, i2, err := s.nomad.Jobs(ctx)
	if err != nil {
		return err
	}
	allocs, i3, err := s.nomad.Allocs(ctx)
	if err != nil {
		return err
	}
	st := model.New()
	for _, n := range nodes {
		st.PutNode(n)
	}
	for _, j := range jobs {
		st.PutJob(j)
	}
	for _, a := range allocs {
		st.PutAlloc(a)
	}
	st.Index = max(i1, i2, i3)
	s.mu.Lock()
	prev := s.state.Index
	st.Learned = s.state.Learned
	s.state, s.synced = st, true
	s.mu.Unlock()
	s.metrics.resyncs.Inc()
	s.log.Info("listed the cluster", "nodes", len(nodes), "jobs", len(jobs), "allocations", len(allocs), "index", st.Index, "previous_index", prev)
	s.markDirty()
	return nil
}

// resyncSoon lists the cluster again outside the event loop.
func (s *Service) resyncSoon(ctx context.Context) {
	if err := s.resync(ctx); err != nil {
		s.log.Warn("relisting failed; the periodic resync will catch up", "error", err)
	}
}
