package service

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// pinsInFlight bounds the pins of one pass sent at once. A burst of jobs
// is decided in one step; sent one after the other, each pin waiting for
// Nomad's answer, the last of 50 would wait for the 49 before it.
const pinsInFlight = 16

// sendPins sends the pins of one pass, up to pinsInFlight at once. The
// step gave each group at most one pin and no share to two groups, so the
// pins of different jobs are independent; those of one job (one per
// group) go one after the other, each on the version the previous one
// registered. A failed pin backs off its group only. A lost lease, or the
// end of the pass's context, stops the pins not yet sent. The reasons of
// the groups not pinned go into pending.
func (s *Service) sendPins(ctx context.Context, pins []decide.Action, jobs map[decide.Key]*api.Job, pending map[decide.Key]string, failed map[decide.Key]bool, start time.Time) {
	var byJob [][]decide.Action // in the step's order
	at := map[string]int{}
	seen := map[decide.Key]bool{}
	for _, a := range pins {
		if failed[a.Group] || jobs[a.Group] == nil || seen[a.Group] {
			continue
		}
		seen[a.Group] = true
		k := model.JobKey(a.Group.Namespace, a.Group.Job)
		i, ok := at[k]
		if !ok {
			i = len(byJob)
			at[k] = i
			byJob = append(byJob, nil)
		}
		byJob[i] = append(byJob[i], a)
	}
	var mu sync.Mutex
	reasons := map[decide.Key]string{}
	set := func(k decide.Key, why string) {
		mu.Lock()
		reasons[k] = why
		mu.Unlock()
	}
	slots := make(chan struct{}, pinsInFlight)
	var wg sync.WaitGroup
	for i, group := range byJob {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		err := ctx.Err()
		if err == nil {
			err = s.mayWrite()
		}
		if err != nil {
			// the lease is lost or the pass ended: what is not sent yet is not sent
			for _, rest := range byJob[i:] {
				for _, a := range rest {
					set(a.Group, "pin not sent: "+err.Error())
				}
			}
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			job := jobs[group[0].Group]
			for _, a := range group {
				registered, why := s.sendPin(ctx, a, job, start)
				if why != "" {
					set(a.Group, why)
				}
				if registered != nil {
					job = registered
				}
			}
		})
	}
	wg.Wait()
	maps.Copy(pending, reasons)
}

// sendPin pins one group and returns the job as registered, or why the
// group is not pinned.
func (s *Service) sendPin(ctx context.Context, a decide.Action, job *api.Job, start time.Time) (*api.Job, string) {
	log := s.log.With("job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group)
	s.metrics.decisions.WithLabelValues("placed").Inc()
	if s.pinDelay > 0 {
		sleep(ctx, s.pinDelay)
	}
	registered, err := s.pinGroup(ctx, job, a)
	if err != nil {
		switch {
		case errors.Is(err, ErrConflict):
			s.metrics.conflicts.Inc()
			log.Info("job changed while deciding; deciding again on the new version")
			s.markDirty()
			return nil, "pin failed: " + err.Error()
		case errors.Is(err, ErrNotLeader):
			return nil, "pin not sent: " + err.Error()
		default:
			why := s.failed(a.Group, "pin", err)
			log.Error("cannot pin the placement", "error", err, "reason", why)
			return nil, why
		}
	}
	s.succeeded(a.Group)
	s.metrics.pinLatency.Observe(s.now().Sub(start).Seconds())
	return registered, ""
}
