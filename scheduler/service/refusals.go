package service

import (
	"maps"
	"slices"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// refusals is what the loop keeps of the groups it may not place now, and
// of why: those refused for good (forGood), the nodes Nomad refused each
// group's pins on (nomad), and the groups whose pin request failed,
// until they are tried again (retries, retry.go). Nomad keeps none of it:
// a refusal for good depends on the whole cluster, Nomad's verdict is
// kept only for the current pin, and a failed request leaves nothing.
//
// Locks: forGood and retries are written under the model's lock
// (cluster.mu, held by the caller, or taken here where a method says so)
// and read by the loop's goroutine without it (only it and the records,
// under the lock, write them), by the API with it. nomad is the loop
// goroutine's own: written by collect (through collected.shared, once a
// pass's workers are done) and read only by a pass, never by the API.
type refusals struct {
	mu *timedMutex // the model's lock (cluster.mu)
	// forGood are the groups refused for good, with the job version,
	// cluster shape and allowed nodes they were refused with: a group is
	// not decided again until one changes
	forGood map[decide.Key]refusal
	// nomad are the nodes Nomad could not place each group's pins on,
	// while the group misses allocations: a pin that fails is decided
	// again without those refused in the last refusedFor, never back and
	// forth between two, and never waiting for ever on a refusal gone
	nomad map[decide.Key]map[string]refusedNode
	// retries are the groups whose pin or preemption failed, until their
	// retry (retry.go)
	retries map[decide.Key]retry
}

func newRefusals(mu *timedMutex) refusals {
	return refusals{mu: mu, forGood: map[decide.Key]refusal{}, nomad: map[decide.Key]map[string]refusedNode{}, retries: map[decide.Key]retry{}}
}

// refusal is a group refused for good: it is not decided again until its
// job or the cluster's nodes change.
type refusal struct {
	reason   string
	jobIndex uint64
	nodes    uint64 // clusterShape when refused
	feasible uint64 // the nodes the job's own rules allowed (nodeSet.hash)
	// read: a refusal this replica read from the leader's records, to
	// show; it holds for no version of the job (holds)
	read bool
}

// newRefusal is a refusal of the version of job the pass read.
func newRefusal(job *api.Job, reason string, shape, feasible uint64) refusal {
	var idx uint64
	if job != nil && job.JobModifyIndex != nil {
		idx = *job.JobModifyIndex
	}
	return refusal{reason: reason, jobIndex: idx, nodes: shape, feasible: feasible}
}

// holds: the refusal still stands for this version of job, these nodes
// and these allowed nodes; anything else changed decides the group again.
func (r refusal) holds(job *api.Job, shape, feasible uint64) bool {
	return job.JobModifyIndex != nil && *job.JobModifyIndex == r.jobIndex && r.nodes == shape && r.feasible == feasible
}

// refusedForGood is group k's refusal for good, if it has one. The caller
// holds the model's lock or is the loop's goroutine.
func (r *refusals) refusedForGood(k decide.Key) (refusal, bool) {
	f, ok := r.forGood[k]
	return f, ok
}

// refuse refuses group k for good. The caller holds the model's lock.
func (r *refusals) refuse(k decide.Key, f refusal) { r.forGood[k] = f }

// forgive forgets group k's refusal for good. The caller holds the
// model's lock.
func (r *refusals) forgive(k decide.Key) { delete(r.forGood, k) }

// refusedGroups are the groups refused for good, for the records. The
// caller holds the model's lock.
func (r *refusals) refusedGroups() map[decide.Key]bool {
	out := make(map[decide.Key]bool, len(r.forGood))
	for k := range r.forGood {
		out[k] = true
	}
	return out
}

// readFrom takes the leader's refusals for good (refused, with their
// reasons in pending): what the leader refused shows as refused here
// too; a refusal read so holds nothing (the leader's own are decided
// with the job and cluster they were made for). The caller holds the
// model's lock.
func (r *refusals) readFrom(pending map[decide.Key]string, refused map[decide.Key]bool) {
	for k, f := range r.forGood {
		if f.read && !refused[k] {
			delete(r.forGood, k)
		}
	}
	for k, never := range refused {
		if _, ok := r.forGood[k]; never && !ok {
			r.forGood[k] = refusal{reason: pending[k], read: true}
		}
	}
}

// refusedFor is how long a node Nomad refused a group's pin on is left
// out of the group's decisions: long enough that a pin decided again
// never swings between two nodes Nomad refuses, short enough that a
// refusal for what the scheduler does not model (a port, a disk) that
// has gone since does not keep the group waiting for ever. Nomad itself
// tries a blocked evaluation again when the cluster changes.
const refusedFor = 5 * time.Minute

// refusedNode is when Nomad refused a group's pin on a node, at which
// version of the job.
type refusedNode struct {
	at      time.Time
	version uint64
}

// byNomad is every node Nomad refused group k's pins on so far, with the
// nodes of the pin it now refused at version of the job: a copy, which
// keepByNomad keeps. A node refused before at the same version keeps its
// time. The caller is the loop's goroutine (a pass's worker may call it:
// it reads only).
func (r *refusals) byNomad(k decide.Key, nodes []string, version uint64, now time.Time) map[string]refusedNode {
	on := maps.Clone(r.nomad[k])
	if on == nil {
		on = map[string]refusedNode{}
	}
	for _, n := range nodes {
		if was, ok := on[n]; !ok || was.version != version {
			on[n] = refusedNode{at: now, version: version}
		}
	}
	return on
}

// keepByNomad keeps what byNomad returned for group k. The caller is the
// loop's goroutine, with no pass worker running (collected.shared).
func (r *refusals) keepByNomad(k decide.Key, on map[string]refusedNode) { r.nomad[k] = on }

// avoidedFor lists the nodes refused less than refusedFor before now. A
// node refused longer ago stays noted for the version it was refused at,
// so that the same refusal does not start its time again.
func avoidedFor(on map[string]refusedNode, now time.Time) []string {
	var out []string
	for n, r := range on {
		if now.Sub(r.at) < refusedFor {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// sweep forgets what concerned groups whose job is gone: their refusals
// for good and their back-offs (found without the model's lock, deleted
// under it: the API reads them), and the nodes Nomad refused a group on
// once it is gone or has all its allocations (what Nomad refused before
// no longer matters). The caller is the loop's goroutine during a pass's
// read of st, without the lock.
func (r *refusals) sweep(st *model.State) {
	never, backoffs := goneKeys(st, r.forGood), goneKeys(st, r.retries)
	if len(never) > 0 || len(backoffs) > 0 {
		r.mu.Lock()
		for _, k := range never {
			delete(r.forGood, k)
		}
		for _, k := range backoffs {
			delete(r.retries, k)
		}
		r.mu.Unlock()
	}
	for k := range r.nomad {
		job := st.Jobs[model.JobKey(k.Namespace, k.Job)]
		if job == nil {
			delete(r.nomad, k)
		} else if tg := pin.Group(job, k.Group); tg == nil || len(st.GroupAllocs(k.Namespace, k.Job, k.Group)) >= pin.Count(tg) {
			delete(r.nomad, k) // placed: what Nomad refused before no longer matters
		}
	}
}

// goneKeys are the groups of m whose job st no longer has.
func goneKeys[V any](st *model.State, m map[decide.Key]V) []decide.Key {
	var gone []decide.Key
	for k := range m {
		if st.Jobs[model.JobKey(k.Namespace, k.Job)] == nil {
			gone = append(gone, k)
		}
	}
	return gone
}
