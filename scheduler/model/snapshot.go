package model

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// PendingPrefix starts the IDs of the holds that keep a pinned group's
// shares reserved until its allocations appear.
const PendingPrefix = "pinned:"

// Snapshot brings the placement core's input up to date with the state
// and returns it. The snapshot lives between calls and is changed only
// where the state changed since (nodes and allocations Nomad reported
// anew, allocations whose job or learned profile changed); the holds of
// pinned groups are made anew each time. Callers leave it as they found
// it (decide.Step does). Nodes that are down, ineligible or draining are
// left out, as are nodes whose gpushare attributes cannot be decoded
// (listed in problems), and the allocations gone reports as gone
// (preempted ones Nomad is stopping).
func (s *State) Snapshot(profiles *interference.Model, gone func(allocID string) bool) *Built {
	ch := s.changed.take()
	full := s.Rebuild || ch.all
	if s.live == nil || s.live.profiles != profiles {
		s.live, full = newLive(profiles), true
	}
	lv := s.live
	snap := lv.snap
	var problems []string
	for id := range lv.holds {
		_, _ = snap.Remove(id)
	}
	lv.holds = map[string]decide.Key{}
	if full {
		lv.syncNodes(s.Nodes, &problems)
		s.syncAllocs(lv, gone, &problems)
		clear(lv.holdJobs)
		for k, job := range s.Jobs {
			if wantsHolds(s, job, profiles) {
				lv.holdJobs[k] = true
			}
		}
	} else {
		s.syncChanged(lv, ch, gone, &problems)
		s.syncHoldJobs(lv, ch, profiles)
	}
	b := &Built{Snapshot: snap, HeldFor: lv.holds, Short: map[decide.Key]bool{}}
	// pinned groups whose allocations are not all there yet keep their shares
	for _, k := range slices.Sorted(maps.Keys(lv.holdJobs)) {
		s.holdJob(s.Jobs[k], profiles, b, &problems)
	}
	b.Problems = problems
	return b
}

// syncHoldJobs looks again at whether the jobs that changed (their
// version, their allocations, what Nomad said of them) have pinned groups
// that hold shares; when nodes changed, at the jobs Nomad could not place
// too (NomadFailed counts their pinned nodes that are usable).
func (s *State) syncHoldJobs(lv *live, ch changes, profiles *interference.Model) {
	look := ch.jobs
	if len(ch.nodes) > 0 && len(s.verdicts.unplaced) > 0 {
		look = maps.Clone(ch.jobs)
		if look == nil {
			look = map[string]bool{}
		}
		for k := range s.verdicts.unplaced {
			look[JobKey(k.Namespace, k.Job)] = true
		}
	}
	keys := make([]string, 0, len(look))
	for k := range look {
		delete(lv.holdJobs, k)
		keys = append(keys, k)
	}
	for i, want := range s.wantHolds(keys, profiles) {
		if want {
			lv.holdJobs[keys[i]] = true
		}
	}
}

// wantHolds reports for each job key whether its job (if the state holds
// it) wantsHolds. Many jobs are looked at by one goroutine per processor,
// each on its own part of keys: nothing in wantsHolds writes the state but
// its parse cache, which locks itself, so they read side by side (the
// jobs of a large pass are mostly new to the processor's caches: on two
// cores, two of them are fetched at a time).
func (s *State) wantHolds(keys []string, profiles *interference.Model) []bool {
	want := make([]bool, len(keys))
	look := func(part []string, out []bool) {
		for i, k := range part {
			job := s.Jobs[k]
			out[i] = job != nil && wantsHolds(s, job, profiles)
		}
	}
	workers := holdWorkers(len(keys))
	if workers <= 1 {
		look(keys, want)
		return want
	}
	s.indexes.groups(s.Allocs) // built once, before they read it together
	var wg sync.WaitGroup
	per := (len(keys) + workers - 1) / workers
	for from := 0; from < len(keys); from += per {
		to := min(from+per, len(keys))
		wg.Go(func() { look(keys[from:to], want[from:to]) })
	}
	wg.Wait()
	return want
}

// holdWorkers is how many goroutines wantHolds looks at n jobs with: one
// per processor, each with wantHoldsPerWorker jobs at least.
func holdWorkers(n int) int { return max(min(runtime.GOMAXPROCS(0), n/wantHoldsPerWorker), 1) }

// wantHoldsPerWorker is the fewest jobs worth a goroutine of their own (a
// variable for the tests).
var wantHoldsPerWorker = 512

// wantsHolds reports whether a pinned group of job holds shares for
// allocations that are missing or are to replace running ones.
func wantsHolds(s *State, job *api.Job, profiles *interference.Model) bool {
	if !mayHold(job) {
		return false
	}
	for _, tg := range job.TaskGroups {
		if _, ok := toHold(s, job, tg, profiles); ok {
			return true
		}
	}
	return false
}

// mayHold reports whether the pins of a job can hold anything.
func mayHold(job *api.Job) bool {
	if (job.Stop != nil && *job.Stop) || Template(job) {
		return false // Nomad never places a template: its pin holds nothing
	}
	_, child := DispatchedFrom(job)
	return !child // its parent's pool: Nomad places the child inside it, holding nothing for it
}

// pinHold is what a pinned group holds shares for.
type pinHold struct {
	rec               *pin.Record
	req               placement.Request
	missing, replaced int
}

// toHold is what pinned group tg of job holds shares for, if anything,
// as the state (s) says; it only reads it.
func toHold(s *State, job *api.Job, tg *api.TaskGroup, profiles *interference.Model) (pinHold, bool) {
	if !s.Pinned(job, *tg.Name) {
		return pinHold{}, false
	}
	if _, failed := s.NomadFailed(job, *tg.Name); failed {
		return pinHold{}, false // Nomad evaluated this pin and could not place it
	}
	rec, _ := s.Record(job, *tg.Name)
	r, err := s.Request(job, *tg.Name, profiles)
	if err != nil {
		return pinHold{}, false
	}
	live, missing := s.Missing(job, tg)
	// allocations of older versions are to be replaced: the new
	// version's pinned shares are held until Nomad has (the
	// replacements' CPU and memory are the old allocations')
	replaced := 0
	if !s.BatchDone(job, *tg.Name) {
		for _, a := range live {
			if !Current(a, job) {
				replaced++
			}
		}
		replaced = min(replaced, pin.Count(tg)-missing)
	}
	return pinHold{rec: rec, req: r, missing: missing, replaced: replaced}, missing+replaced > 0
}

// holdJob adds to the snapshot the holds of job's pinned groups.
func (s *State) holdJob(job *api.Job, profiles *interference.Model, b *Built, problems *[]string) {
	if !mayHold(job) {
		return
	}
	snap := b.Snapshot
	for _, tg := range job.TaskGroups {
		h, ok := toHold(s, job, tg, profiles)
		if !ok {
			continue
		}
		key := KeyOf(job, *tg.Name)
		rec := feasiblePart(s.Feasible, job, *tg.Name, h.rec)
		free := 0 // pinned shares no allocation holds
		for _, a := range holds(key, rec, snap.InUse, h.req, h.missing, h.replaced, snap) {
			a.VC, a.Class = Attribution(s, job, *tg.Name) // as its allocations will count
			free += len(a.Shares)
			if err := snap.AddAlloc(a); err != nil {
				// CPU or memory: Nomad places it once they free
				*problems = append(*problems, fmt.Sprintf("hold for %s: %v", h.req.ID, err))
				continue
			}
			b.HeldFor[a.ID] = key
		}
		if free < h.missing*h.req.Shares {
			b.Short[key] = true // another allocation took pinned shares
		}
	}
}

// Built is the placement core's input built from the state.
type Built struct {
	Snapshot *placement.Snapshot
	// HeldFor names the group of each hold in the snapshot.
	HeldFor map[string]decide.Key
	// Short are pinned groups missing allocations whose pinned shares are
	// no longer all free (another allocation took some, or their node is
	// gone): Nomad cannot place them where they are pinned. A hold that
	// does not fit the node's CPU or memory does not make a group short:
	// Nomad places it once they free.
	Short map[decide.Key]bool
	// Problems are what could not be modelled, for the log.
	Problems []string
}

// feasiblePart is the record with only the pinned nodes the job's current
// version still allows (feasible: State.Feasible): no hold on nodes where
// Nomad cannot place the group.
func feasiblePart(feasible func(job *api.Job, group string) func(node string) bool, job *api.Job, group string, rec *pin.Record) *pin.Record {
	if feasible == nil {
		return rec
	}
	allows := feasible(job, group)
	if allows == nil {
		return rec
	}
	var keep []string
	for _, n := range rec.Nodes {
		if allows(n) {
			keep = append(keep, n)
		}
	}
	if len(keep) == len(rec.Nodes) {
		return rec
	}
	part := *rec
	part.Nodes = keep
	return &part
}

// holds keeps the shares a pinned group is still to be given, one
// allocation's worth per node, while its allocations are missing (with
// their CPU and memory) or are to replace running ones of an older
// version (shares only: they take the CPU and memory of what they
// replace).
func holds(key decide.Key, rec *pin.Record, inUse func(share string) bool, r placement.Request, missing, replaced int, snap *placement.Snapshot) []placement.Alloc {
	byNode := map[string][]string{}
	for _, sh := range rec.Shares {
		if inUse(sh) {
			continue
		}
		sid, err := devicefn.ParseShareID(sh)
		if err != nil {
			continue
		}
		for _, nodeID := range rec.Nodes {
			n, ok := snap.Node(nodeID)
			if !ok {
				continue
			}
			for _, g := range n.GPUs {
				if g.UUID == sid.UUID {
					byNode[nodeID] = append(byNode[nodeID], sh)
				}
			}
		}
	}
	var out []placement.Alloc
	for _, nodeID := range slices.Sorted(maps.Keys(byNode)) {
		if missing+replaced <= 0 {
			break
		}
		shares := byNode[nodeID]
		worth := 1
		if r.Shares > 0 {
			worth = max(1, min(missing+replaced, len(shares)/r.Shares))
		}
		fresh := min(worth, missing) // those that need CPU and memory of their own
		missing -= fresh
		replaced -= worth - fresh
		out = append(out, placement.Alloc{
			ID: PendingPrefix + key.String() + "@" + nodeID, Node: nodeID, Shares: shares,
			Res:     placement.Resources{CPU: r.Res.CPU * int64(fresh), MemoryMiB: r.Res.MemoryMiB * int64(fresh)},
			Profile: r.Profile, MaxSlowdown: r.MaxSlowdown, Timeslice: r.Timeslice,
		})
	}
	return out
}

func namespaceOf(job *api.Job) string {
	if job.Namespace == nil {
		return ""
	}
	return *job.Namespace
}

// Usable reports whether new work may be placed on the node.
func Usable(n *api.Node) bool {
	return n.Status == api.NodeStatusReady && n.SchedulingEligibility == api.NodeSchedulingEligible && !n.Drain && n.NodeResources != nil
}

// NodeOf converts a Nomad node into the placement core's node.
func NodeOf(n *api.Node) (*placement.Node, error) {
	if n.NodeResources == nil {
		return nil, fmt.Errorf("%w %q: it reports no resources", placement.ErrBadNode, n.ID)
	}
	// per-GPU groups (device_groups = "gpu") merged back by model
	groups, errs := nomadattr.DecodeGroups(n.NodeResources.Devices)
	if len(errs) > 0 {
		return nil, fmt.Errorf("node %s: %w", n.Name, errs[0])
	}
	capacity := placement.Resources{CPU: n.NodeResources.Cpu.CpuShares, MemoryMiB: n.NodeResources.Memory.MemoryMB}
	if rr := n.ReservedResources; rr != nil {
		capacity.CPU -= int64(rr.Cpu.CpuShares)
		capacity.MemoryMiB -= int64(rr.Memory.MemoryMB)
	}
	return placement.NodeFromGroups(n.ID, n.Name, capacity, n.Meta, groups)
}

// Shares returns the gpushare share IDs an allocation holds.
func Shares(a *api.Allocation) []string {
	if a.AllocatedResources == nil {
		return nil
	}
	var ids []string
	for _, tr := range a.AllocatedResources.Tasks {
		if tr == nil {
			continue
		}
		for _, d := range tr.Devices {
			if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.DeviceType {
				ids = append(ids, d.DeviceIDs...)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// Resources returns the CPU and memory an allocation holds.
func Resources(a *api.Allocation) placement.Resources {
	var r placement.Resources
	if a.AllocatedResources == nil {
		return r
	}
	for _, tr := range a.AllocatedResources.Tasks {
		if tr == nil {
			continue
		}
		r.CPU += tr.Cpu.CpuShares
		r.MemoryMiB += tr.Memory.MemoryMB
	}
	return r
}

// IsHold reports whether an allocation ID in a snapshot is a hold.
func IsHold(id string) bool { return strings.HasPrefix(id, PendingPrefix) }
