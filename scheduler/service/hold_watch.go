package service

import (
	"crypto/hmac"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// Which jobs are holds. A hold is kept out of the model (its shares are
// its group's), so a job is taken for one only when it is the
// scheduler's own: named with HoldPrefix and signed by the records' key
// for a group of the hold's own namespace. Any other job — a user's that
// takes the prefix, a hold copied into another namespace, anything read
// before the key is loaded — is modelled like any job, and its
// allocations hold their shares: else a job named so would take shares
// past the queue, the virtual clusters' quotas and the interference
// rules, and other groups would be pinned onto them. A new key judges
// every hold-named job again (rejudgeHolds).

// ownHold reports whether j is one of the scheduler's holds (above).
// Without the key nothing is. The caller holds s.mu.
func (s *records) ownHold(j *api.Job) bool {
	if j == nil || j.ID == nil || !isHold(*j.ID) {
		return false
	}
	key, ok := decide.ParseKey(j.Meta[metaHoldFor])
	if !ok || model.JobKey(key.Namespace, "") != model.JobKey(nsOf(j), "") {
		return false
	}
	sig, ok := s.sign(key, holdPayload(j))
	return ok && hmac.Equal([]byte(sig), []byte(j.Meta[metaHoldSig]))
}

// isOwnHold is ownHold through the cluster's hook (none: no job is a
// hold). The caller holds mu.
func (c *cluster) isOwnHold(j *api.Job) bool {
	return c.verifyHold != nil && j != nil && j.ID != nil && isHold(*j.ID) && c.verifyHold(j)
}

// holdAlloc reports whether an allocation is a hold's: its job was judged
// one (holdJobs). The caller holds mu.
func (c *cluster) holdAlloc(a *api.Allocation) bool {
	_, ok := c.holdJobs[model.JobKey(a.Namespace, a.JobID)]
	return a != nil && ok
}

// putJob records a job read from Nomad: the scheduler's hold in the hold
// book, out of the model (with its allocations, when the model took it
// before its key was loaded), any other in the model. The caller holds
// mu and runs it where the model is written (write).
func (c *cluster) putJob(j *api.Job) {
	k := model.JobKey(nsOf(j), *j.ID)
	if c.isOwnHold(j) {
		c.markHold(k, j)
		c.putHold(j)
		if c.state.Jobs[k] != nil {
			c.state.DeleteJob(nsOf(j), *j.ID)
		}
		return
	}
	if _, ok := c.holdJobs[k]; ok { // its ID now names a job that is not a hold
		delete(c.holdJobs, k)
		delete(c.holds, k)
	}
	c.state.PutJob(j)
}

// markHold notes that job k (j) is a hold. The caller holds mu.
func (c *cluster) markHold(k string, j *api.Job) {
	if c.holdJobs == nil {
		c.holdJobs = map[string]uint64{}
	}
	c.holdJobs[k] = max(c.holdJobs[k], ptrUint(j.ModifyIndex))
}

func ptrUint(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// splitHolds sorts the hold-named jobs a listing read (listed at index):
// the holds and the other jobs, which the listing models. holdJobs keeps
// the holds that events brought after the jobs were listed (their
// allocations may be in the listing), and forgets those the listing
// shows gone. The caller holds mu.
func (c *cluster) splitHolds(read []*api.Job, index uint64) (holds, jobs []*api.Job) {
	listed := map[string]bool{}
	for _, j := range read {
		k := model.JobKey(nsOf(j), *j.ID)
		listed[k] = true
		if c.isOwnHold(j) {
			c.markHold(k, j)
			holds = append(holds, j)
		} else {
			delete(c.holdJobs, k)
			jobs = append(jobs, j)
		}
	}
	for k, at := range c.holdJobs {
		if !listed[k] && at <= index {
			delete(c.holdJobs, k)
		}
	}
	return holds, jobs
}

// rejudgeHolds judges the hold-named jobs again once the key changed. A
// job the model holds that now verifies leaves it with its allocations
// (the model has them all). Holds judged with a former key may no longer
// verify, and would enter the model with their allocations, which were
// kept out: no pass decides until a listing brings them (synced), which
// is asked for. The caller holds mu.
func (c *cluster) rejudgeHolds() {
	c.write(func() {
		if len(c.holdJobs) > 0 {
			c.synced = false
			c.askRelist()
		}
		for _, j := range c.state.Jobs {
			if j.ID != nil && isHold(*j.ID) && c.isOwnHold(j) {
				c.putJob(j)
			}
		}
	})
}

// askRelist asks the watcher to list the cluster again, beside the
// stream. The caller holds mu.
func (c *cluster) askRelist() {
	select {
	case c.relistNow <- struct{}{}:
	default: // one is asked for already (or no watcher listens)
	}
}

// relistWanted is the channel of askRelist while no listing runs beside
// the stream (running is not nil), else nil: one asked for meanwhile
// waits for the next select.
func (w *watcher) relistWanted(running chan error) <-chan struct{} {
	if running != nil {
		return nil
	}
	return w.relistNow
}
