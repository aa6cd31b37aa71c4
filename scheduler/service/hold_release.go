package service

import (
	"context"
	"crypto/hmac"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// putHold records a hold job as the watcher read it. The caller holds mu.
func (c *cluster) putHold(j *api.Job) {
	if c.holds == nil {
		c.holds = holdBook{}
	}
	c.holds.put(j)
}

// setHolds replaces the holds with a full listing's. The caller holds mu.
func (c *cluster) setHolds(jobs []*api.Job) {
	c.holds = holdBook{}
	for _, j := range jobs {
		c.holds.put(j)
	}
}

// release is one hold to let go, and why.
type release struct {
	namespace, id, why string
	key                decide.Key
}

// releaseHolds lets go the holds whose work is done: on each node, one
// hold of a group once the group's live allocations hold every pinned
// share there that no hold holds (Nomad placed the allocation before it),
// and every hold of a group whose job is gone or stopped, pinned again or
// unpinned, or that has outlived holdLife. Only the leader releases.
func (st *stager) releaseHolds(ctx context.Context, snap *placement.Snapshot) {
	h := st.nomad
	if h == nil || st.lease.mayWrite() != nil {
		return
	}
	st.c.mu.Lock()
	drop := st.holdsDone(snap)
	st.c.mu.Unlock()
	for _, r := range drop {
		rctx, cancel := st.request(ctx)
		err := h.StopJob(rctx, r.namespace, r.id)
		cancel()
		if err != nil && !isNotFound(err) {
			st.log.Warn("cannot release a hold; trying again at the next pass", "hold", r.id, "error", err)
			continue
		}
		st.c.mu.Lock()
		delete(st.c.holds, model.JobKey(r.namespace, r.id))
		st.c.mu.Unlock()
		st.log.Info("released a hold", "hold", r.id, "for", r.key.String(), "reason", r.why)
		st.dirty()
	}
}

// holdsDone lists the holds to release (releaseHolds). The caller holds
// the model's lock.
func (st *stager) holdsDone(snap *placement.Snapshot) []release {
	type at struct {
		key  decide.Key
		node string
	}
	staged := map[at][]*api.Job{}
	var out []release
	for _, j := range st.c.holds {
		key, ok := decide.ParseKey(j.Meta[metaHoldFor])
		if !ok || !st.holdSigned(key, j) {
			continue // not ours to stop: the scheduler signs its holds
		}
		if why := st.holdStale(key, j); why != "" { // each on its own: an older pin's beside a newer one's
			out = append(out, release{namespace: nsOf(j), id: *j.ID, why: why, key: key})
			continue
		}
		k := at{key, j.Meta[metaHoldNode]}
		staged[k] = append(staged[k], j)
	}
	for _, k := range slices.SortedFunc(maps.Keys(staged), func(a, b at) int {
		return strings.Compare(a.key.String()+"@"+a.node, b.key.String()+"@"+b.node)
	}) {
		holds := staged[k]
		slices.SortFunc(holds, func(a, b *api.Job) int { return strings.Compare(*a.ID, *b.ID) })
		// what /v1/groups and the page say
		st.notes.sayStage(k.key, fmt.Sprintf("staged on node %s: %d allocation(s) wait for GPUs held for them by %s, each let go once Nomad has placed the one before (Nomad could otherwise give one allocation shares of two GPUs)",
			k.node, len(holds), *holds[0].ID))
		if st.placedBefore(k.key, k.node, holds, snap) {
			out = append(out, release{namespace: nsOf(holds[0]), id: *holds[0].ID, key: k.key,
				why: "the group's allocations hold every pinned GPU on the node not held: Nomad places the next one on the GPUs this hold frees"})
		}
	}
	return out
}

// holdSigned reports whether a hold is the scheduler's own (its
// signature verifies). The caller holds the model's lock.
func (st *stager) holdSigned(key decide.Key, j *api.Job) bool {
	sig, ok := st.signer.sign(key, holdPayload(j))
	return ok && hmac.Equal([]byte(sig), []byte(j.Meta[metaHoldSig]))
}

// holdStale says why a hold no longer stages its group's pin ("" while it
// does).
func (st *stager) holdStale(key decide.Key, hold *api.Job) string {
	job := st.c.state.Jobs[model.JobKey(key.Namespace, key.Job)]
	switch {
	case job == nil:
		return "its job is gone"
	case job.Stop != nil && *job.Stop:
		return "its job is stopped"
	case pinDigest(job, key.Group) != hold.Meta[metaHoldPin] && !st.awaited(key, hold):
		return "its group is no longer pinned as when it was held"
	case hold.SubmitTime != nil && st.now().Sub(time.Unix(0, *hold.SubmitTime)) > holdLife:
		return "held longer than " + holdLife.String()
	}
	return ""
}

// placedBefore reports whether the group's live allocations hold every
// share its pin names on the node that the holds do not hold.
func (st *stager) placedBefore(key decide.Key, node string, holds []*api.Job, snap *placement.Snapshot) bool {
	job := st.c.state.Jobs[model.JobKey(key.Namespace, key.Job)]
	rec, ok := st.c.state.Record(job, key.Group)
	n, known := snap.Node(node)
	if !ok || !known {
		return false
	}
	onNode := map[string]bool{}
	for _, g := range n.GPUs {
		onNode[g.UUID] = true
	}
	held := map[string]bool{}
	for _, j := range holds {
		for _, sh := range heldShares(j) {
			held[sh] = true
		}
	}
	taken := map[string]bool{}
	for _, a := range st.c.state.GroupAllocs(key.Namespace, key.Job, key.Group) {
		if a.NodeID == node && model.Live(a) {
			for _, sh := range model.Shares(a) {
				taken[sh] = true
			}
		}
	}
	for _, sh := range rec.Shares {
		id, err := devicefn.ParseShareID(sh)
		if err != nil || !onNode[id.UUID] || held[sh] {
			continue
		}
		if !taken[sh] {
			return false
		}
	}
	return true
}

// heldShares are the shares a hold job holds (its device constraint).
func heldShares(j *api.Job) []string {
	for _, tg := range j.TaskGroups {
		for _, t := range tg.Tasks {
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				for _, c := range d.Constraints {
					if c.LTarget == pin.DeviceAttribute {
						return strings.Split(c.RTarget, ",")
					}
				}
			}
		}
	}
	return nil
}

// readHolds reads the hold jobs a listing found.
func (w *watcher) readHolds(ctx context.Context, stubs []*api.JobListStub) ([]*api.Job, error) {
	var out []*api.Job
	for _, st := range stubs {
		j, err := w.nomad.Job(ctx, st.Namespace, st.ID)
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("read hold %s: %w", st.ID, err)
		}
		out = append(out, j)
	}
	return out, nil
}

var _ holdNomad = nomadClient{}

func (n nomadClient) RegisterHold(ctx context.Context, job *api.Job) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	_, _, err := n.c.Jobs().Register(job, (&api.WriteOptions{Namespace: nsOf(job)}).WithContext(ctx))
	return err
}

func (n nomadClient) JobAllocs(ctx context.Context, namespace, id string) ([]*api.AllocationListStub, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	allocs, _, err := n.c.Jobs().Allocations(id, false, q(ctx, namespace))
	return allocs, err
}

// StopJob registers the job again stopped: the scheduler's ACL policy
// has register-job, not the deregister of submit-job.
func (n nomadClient) StopJob(ctx context.Context, namespace, id string) error {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	job, _, err := n.c.Jobs().Info(id, q(ctx, namespace))
	if err != nil {
		return err
	}
	if job.Stop != nil && *job.Stop {
		return nil
	}
	job.Stop = new(true)
	_, _, err = n.c.Jobs().Register(job, (&api.WriteOptions{Namespace: namespace}).WithContext(ctx))
	return err
}
