package service

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// collectChurn is a random cluster's life for collect's reuse to keep up
// with, changed in the model as the watcher would: new jobs and versions
// (scaled, gated again, stopped), allocations placed, failed, stopped or
// placed on another group's pinned shares, nodes lost, drained,
// ineligible or with a GPU lost, pins written, purges, back-off,
// refusals, preemptions in flight, learned profiles, what Nomad said of
// pins, a new trust in pin records, earlier pins read, and time passing.
type collectChurn struct {
	t     *testing.T
	rng   *rand.Rand
	s     *Service
	index uint64
	now   *time.Time
	nodes map[string]*api.Node // every node the cluster had, as first listed
	// distrust, when set, has the model trust no pin record
	distrust *bool
}

const churnNodeCount = 6

// st is the model; the caller holds s.mu.
func (c *collectChurn) st() *model.State { return c.s.state }

// pick returns a random element of a sorted key list ("" when empty).
func pick[V any](rng *rand.Rand, m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) == 0 {
		return ""
	}
	return keys[rng.IntN(len(keys))]
}

// newVersion is a copy of job as Nomad would store a new version of it.
func (c *collectChurn) newVersion(job *api.Job) *api.Job {
	j, err := cloneJob(job)
	must.NoError(c.t, err)
	j.ModifyIndex, j.JobModifyIndex = ptr(c.index), ptr(c.index)
	j.Version = ptr(*cmp.Or(job.Version, ptr(uint64(0))) + 1)
	return j
}

// shares are n shares of GPU g of node i from index from.
func shares(i, g, from, n int) []string {
	var out []string
	for k := range n {
		out = append(out, devicefn.ShareID{UUID: fmt.Sprintf("GPU-%04d-%d", i, g), Index: from + k}.String())
	}
	return out
}

// alloc is an allocation of job's group g on node with shares.
func (c *collectChurn) alloc(job, node string, sh []string) *api.Allocation {
	return &api.Allocation{ID: fmt.Sprintf("a-%s-%d", job, c.index), Namespace: "default", JobID: job, TaskGroup: "g", NodeID: node,
		DesiredStatus: "run", ClientStatus: "running", CreateTime: c.now.UnixNano(), ModifyIndex: c.index, CreateIndex: c.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu: api.AllocatedCpuResources{CpuShares: 100}, Memory: api.AllocatedMemoryResources{MemoryMB: 128},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: sh}},
		}}}}
}

// step changes the model one random way. The caller holds s.mu.
func (c *collectChurn) step() {
	c.index++
	s, l, rng := c.st(), c.s.loop, c.rng
	keyOf := func(id string) decide.Key { return decide.Key{Namespace: "default", Job: id, Group: "g"} }
	jobID := func() string {
		k := pick(rng, s.Jobs)
		if k == "" {
			return ""
		}
		return *s.Jobs[k].ID
	}
	switch rng.IntN(17) {
	case 0: // a new gated job, a service or a batch job
		job := gated(fmt.Sprintf("new-%d", c.index), uint64(25*(1+rng.IntN(4))))
		if rng.IntN(2) == 0 {
			job.Type = ptr(api.JobTypeBatch)
		}
		if rng.IntN(2) == 0 { // rules of its own: the nodes it may use change with the nodes
			op := []string{"=", "!="}[rng.IntN(2)]
			job.Constraints = []*api.Constraint{{LTarget: "${node.unique.name}", Operand: op, RTarget: fmt.Sprintf("node-%04d", rng.IntN(churnNodeCount))}}
		}
		job.ModifyIndex, job.JobModifyIndex = ptr(c.index), ptr(c.index)
		s.PutJob(job)
	case 1: // a new version: scaled, gated again, stopped, or only a new index
		id := jobID()
		if id == "" {
			return
		}
		job := c.newVersion(s.Jobs[model.JobKey("default", id)])
		switch rng.IntN(4) {
		case 0:
			job.TaskGroups[0].Count = ptr(1 + rng.IntN(3))
		case 1:
			job.TaskGroups[0].Constraints = append(job.TaskGroups[0].Constraints, pin.Gate())
		case 2:
			job.Stop = ptr(rng.IntN(2) == 0)
		}
		s.PutJob(job)
	case 2: // a pin is written for a gated job, on shares of a random GPU
		id := jobID()
		if id == "" {
			return
		}
		job := c.newVersion(s.Jobs[model.JobKey("default", id)])
		i, g := rng.IntN(churnNodeCount), rng.IntN(8)
		d := &placement.Decision{Request: "default/" + id + "/g", Policy: "gpushare",
			Placements: []placement.Placement{{AllocID: id, Node: fmt.Sprintf("node-%04d", i), GPUs: []string{fmt.Sprintf("GPU-%04d-%d", i, g)},
				Shares: shares(i, g, 75, 25)}}}
		if _, err := pin.Pin(job, "g", d); err != nil {
			return
		}
		s.PutJob(job)
	case 3, 4: // an allocation of a pinned job comes, on its pinned shares
		id := jobID()
		if id == "" {
			return
		}
		job := s.Jobs[model.JobKey("default", id)]
		rec, ok := s.Record(job, "g")
		if !ok {
			return
		}
		s.PutAlloc(c.alloc(id, rec.Nodes[0], rec.Shares))
	case 5: // an allocation fails, completes, is lost or stopped
		id := pick(rng, s.Allocs)
		if id == "" {
			return
		}
		a := *s.Allocs[id]
		a.ModifyIndex = c.index
		switch rng.IntN(4) {
		case 0:
			a.ClientStatus = api.AllocClientStatusFailed
		case 1:
			a.ClientStatus = api.AllocClientStatusComplete
		case 2:
			a.ClientStatus = api.AllocClientStatusLost
		default:
			a.DesiredStatus = api.AllocDesiredStatusStop
		}
		s.PutAlloc(&a)
	case 6: // a node goes down, drains, turns ineligible, loses a GPU, comes back or leaves
		id := fmt.Sprintf("node-%04d", rng.IntN(churnNodeCount))
		if k := pick(rng, s.Jobs); k != "" && rng.IntN(2) == 0 {
			if rec, ok := s.Record(s.Jobs[k], "g"); ok {
				id = rec.Nodes[0] // one a pin names
			}
		}
		n := *c.nodes[id]
		n.ModifyIndex = c.index
		switch rng.IntN(6) {
		case 0:
			n.Status = api.NodeStatusDown
		case 1:
			n.Drain = true
		case 2:
			n.SchedulingEligibility = api.NodeSchedulingIneligible
		case 3:
			s.DeleteNode(id)
			return
		case 4: // a share of one GPU unhealthy: the plugin marks the GPU lost
			res := *n.NodeResources
			d := *res.Devices[0]
			g := rng.IntN(8)
			d.Instances = []*api.NodeDevice{{ID: shares(int(id[len(id)-1]-'0'), g, 0, 1)[0], Healthy: false}}
			res.Devices = []*api.NodeDeviceResource{&d}
			n.NodeResources = &res
		}
		s.PutNode(&n)
	case 7: // a purge
		if id := jobID(); id != "" {
			s.DeleteJob("default", id)
		}
	case 8: // a group backs off after a failure, or its back-off is forgotten
		id := jobID()
		if id == "" {
			return
		}
		if rng.IntN(3) == 0 {
			delete(l.refusals.retries, keyOf(id))
		} else {
			l.refusals.retries[keyOf(id)] = retry{at: c.now.Add(time.Duration(rng.IntN(20)) * time.Second), delay: time.Second, reason: "pin failed"}
		}
	case 9: // time passes
		*c.now = c.now.Add(time.Duration(rng.IntN(15)) * time.Second)
	case 10: // Nomad could not place a pin (or placed it)
		id := jobID()
		if id == "" {
			return
		}
		job := s.Jobs[model.JobKey("default", id)]
		e := &api.Evaluation{ID: fmt.Sprint(c.index), Namespace: "default", JobID: id, JobModifyIndex: *job.JobModifyIndex, Status: api.EvalStatusComplete}
		if rng.IntN(3) > 0 {
			e.FailedTGAllocs = map[string]*api.AllocationMetric{"g": {NodesEvaluated: 1, NodesExhausted: 1, DimensionExhausted: map[string]int{"devices: nvidia/gpushare": 1}}}
		}
		s.PutEval(e)
	case 11: // a learned profile, or one forgotten
		if id := jobID(); id != "" {
			if rng.IntN(2) == 0 {
				s.Learn("default/"+id+"/g", interference.Profile{Name: "learned", SM: rng.Float64(), MemBW: rng.Float64()})
			} else {
				s.Unlearn("default/" + id + "/g")
			}
		}
	case 12: // the trust in pin records changes (now and then), or a refusal is noted
		if rng.IntN(4) == 0 {
			*c.distrust = !*c.distrust
			s.ForgetParsed() // as the service does when its key changes
		} else if id := jobID(); id != "" {
			l.refusals.forGood[keyOf(id)] = newRefusal(s.Jobs[model.JobKey("default", id)], "no room", 0, 0)
		}
	case 13: // a preemption in flight, or over
		if id := pick(rng, s.Allocs); id != "" {
			if _, ok := l.preempted[id]; ok {
				delete(l.preempted, id)
			} else {
				l.preempted[id] = *c.now
			}
		}
	case 14: // another job's allocation on a pinned job's shares (Nomad placed an ungated job there)
		id := jobID()
		if id == "" {
			return
		}
		if rec, ok := s.Record(s.Jobs[model.JobKey("default", id)], "g"); ok {
			s.PutAlloc(c.alloc("plain-"+id, rec.Nodes[0], rec.Shares[:5]))
		}
	case 15: // an allocation placed for a gated or adopted group on random shares
		id := jobID()
		if id == "" {
			return
		}
		i, g := rng.IntN(churnNodeCount), rng.IntN(8)
		s.PutAlloc(c.alloc(id, fmt.Sprintf("node-%04d", i), shares(i, g, 50, 25)))
	case 16: // the version a running allocation was placed with is read (readPriors), its pin not learned
		if id := pick(rng, l.priors.asked); id != "" {
			l.priors.asked[id] = true
		}
	}
}

// collectOut is what collect returned, in a stable order, with the
// stages it left for the API.
type collectOut struct {
	Groups  []decide.Group
	Jobs    map[decide.Key]*api.Job
	Pending map[decide.Key]string
	InPlace []decide.Action
	Stages  map[decide.Key]lifecycle.Result
}

// collectOnce runs collect on built, with reuse on or off. The caller
// holds s.mu.
func collectOnce(l *loop, built *model.Built, shape uint64, full bool) collectOut {
	l.collectCache().full = full
	defer func() { l.collectCache().full = false }()
	g, j, p, in := collectReading(l, built, shape)
	l.mu.Unlock()
	l.publishStages()
	l.mu.Lock()
	slices.SortFunc(g, func(a, b decide.Group) int { return cmp.Compare(a.Key.String(), b.Key.String()) })
	slices.SortFunc(in, func(a, b decide.Action) int { return cmp.Compare(a.Group.String(), b.Group.String()) })
	return collectOut{Groups: g, Jobs: j, Pending: p, InPlace: in, Stages: maps.Clone(l.answers.stages)}
}

// What collect returns with reuse (looking again only at the jobs whose
// inputs changed) is, after any sequence of changes, what it returns
// looking at every job: the same groups to decide, their jobs, why each
// group waits, the pins written back, and every group's stage.
func TestCollectReuseMatchesAFullWalk(t *testing.T) {
	must.Positive(t, collectMatchesAFullWalk(t, false)) // reuse did happen
}

// The same, with the jobs each reusing pass looks at split between four
// goroutines (one job each at least), against a full walk by the loop's
// goroutine alone: the same groups, reasons and stages, and the same
// loop and cache for the passes after (under -race: the workers only
// read what they share).
func TestCollectReuseMatchesAFullWalkSideBySide(t *testing.T) {
	defer func(per, procs int) { derivePerWorker = per; runtime.GOMAXPROCS(procs) }(derivePerWorker, runtime.GOMAXPROCS(4))
	must.Positive(t, collectMatchesAFullWalk(t, true))
}

// collectMatchesAFullWalk runs the churn of TestCollectReuseMatchesAFullWalk,
// with split reusing passes on several goroutines, and returns how many
// jobs the cache reused.
func collectMatchesAFullWalk(t *testing.T, split bool) int {
	reused := 0
	for seed := range uint64(6) {
		now := time.Unix(1000, 0)
		f := benchCluster(t, churnNodeCount, 4, 6)
		cfg := config.Default()
		cfg.AdoptUngated = ptr(seed%2 == 0)
		s, err := newService(cfg, hclog.NewNullLogger(), benchNomad{f}, func() time.Time { return now })
		must.NoError(t, err)
		must.NoError(t, s.watcher.resync(t.Context()))
		distrust, trust := false, s.state.Trust
		s.state.Trust = func(k decide.Key, placement, signature string) bool {
			return !distrust && (trust == nil || trust(k, placement, signature))
		}
		c := &collectChurn{t: t, rng: rand.New(rand.NewPCG(seed, 30)), s: s, index: 1000, now: &now, nodes: map[string]*api.Node{}, distrust: &distrust}
		for _, n := range f.nodes {
			c.nodes[n.ID] = n
		}
		for step := range 400 {
			s.mu.Lock()
			c.step()
			if c.rng.IntN(3) == 0 && step < 399 {
				s.mu.Unlock()
				continue // several changes between two passes
			}
			l := s.loop
			built := s.state.Snapshot(l.profile, func(id string) bool { _, ok := l.preempted[id]; return ok })
			shape := clusterShape(built.Snapshot)
			if split {
				derivePerWorker = 1
			}
			got := collectOnce(l, built, shape, false)
			if split && l.collectCache().looked > 1 {
				must.Eq(t, min(l.collectCache().looked, 4), l.collectCache().workers)
			}
			reused += len(l.collectCache().entries) - len(l.collectCache().volatile)
			if split {
				derivePerWorker = 1 << 30 // the full walk on one goroutine
			}
			want := collectOnce(l, built, shape, true)
			must.Eq(t, 1, l.collectCache().workers)
			s.mu.Unlock()
			at := must.Sprintf("seed %d step %d", seed, step)
			must.Eq(t, want.Pending, got.Pending, at)
			must.Eq(t, want.Stages, got.Stages, at)
			must.Eq(t, want.Groups, got.Groups, at)
			must.Eq(t, want.Jobs, got.Jobs, at)
			must.Eq(t, want.InPlace, got.InPlace, at)
		}
	}
	return reused
}

// clusterShape hashes what fmt wrote before it appended by hand: the same
// bytes, so the same hash.
func TestClusterShapeHashesWhatFmtWrote(t *testing.T) {
	s := newTestService(t, benchCluster(t, 3, 1, 1))
	s.mu.Lock()
	snap := s.state.Snapshot(s.loop.profile, nil).Snapshot
	s.mu.Unlock()
	h := fnv.New64a()
	for _, n := range snap.Nodes() {
		fmt.Fprintf(h, "%s|%d|%d|", n.ID, n.Capacity.CPU, n.Capacity.MemoryMiB)
		for i := range n.GPUs {
			fmt.Fprintf(h, "%s/%s/%d,", n.GPUs[i].UUID, n.GPUs[i].Model, n.GPUs[i].Shares)
		}
	}
	must.Eq(t, h.Sum64(), clusterShape(snap))
	must.SliceLen(t, 3, snap.Nodes())
}

// A pass hashes the cluster's shape again only when its nodes changed
// (placement.Snapshot.Epoch): a node removed or added again gives the new
// shape; until then the last hash is kept, even were a node changed in
// place (which the model never does: a changed node is removed and added).
func TestTheClusterShapeIsHashedAgainOnlyWhenNodesChange(t *testing.T) {
	s := newTestService(t, benchCluster(t, 3, 1, 1))
	s.mu.Lock()
	snap := s.state.Snapshot(s.loop.profile, nil).Snapshot
	s.mu.Unlock()
	first := s.loop.shape.hashOf(snap)
	must.Eq(t, clusterShape(snap), first)
	n := snap.Nodes()[0]
	n.Capacity.CPU++ // in place: not seen
	must.Eq(t, first, s.loop.shape.hashOf(snap))
	_, err := snap.RemoveNode(n.ID)
	must.NoError(t, err)
	must.NoError(t, snap.AddNode(n))
	again := s.loop.shape.hashOf(snap)
	must.NotEq(t, first, again)
	must.Eq(t, clusterShape(snap), again)
	other := placement.NewSnapshot() // another snapshot is hashed anew
	must.Eq(t, clusterShape(other), s.loop.shape.hashOf(other))
}

// A pass looks again only at the jobs that changed: none when nothing
// did, the one whose allocation failed, those whose pins name a node that
// went down, and every job with a group to place when any node changed.
func TestCollectLooksOnlyAtWhatChanged(t *testing.T) {
	f := benchCluster(t, 4, 3, 0) // 12 running jobs, 3 a node
	s := newTestService(t, f)
	l := s.loop
	pass := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		built := l.state.Snapshot(l.profile, nil)
		collectReading(l, built, clusterShape(built.Snapshot))
		return l.collectCache().looked
	}
	must.Eq(t, 12, pass()) // the first pass looks at every job
	must.Eq(t, 0, pass())
	s.mu.Lock()
	a := *s.state.Allocs["alloc-run-0001-02"]
	a.ClientStatus, a.ModifyIndex = api.AllocClientStatusFailed, 50
	s.state.PutAlloc(&a)
	s.mu.Unlock()
	must.Eq(t, 1, pass())
	must.Eq(t, 0, pass())
	s.mu.Lock()
	n := *s.state.Nodes["node-0002"]
	n.Status, n.ModifyIndex = api.NodeStatusDown, 51
	s.state.PutNode(&n)
	s.mu.Unlock()
	must.Eq(t, 3, pass()) // the three pinned there
	s.mu.Lock()
	w := gated("waiting", 25)
	w.ModifyIndex, w.JobModifyIndex = ptr(uint64(52)), ptr(uint64(52))
	s.state.PutJob(w)
	s.mu.Unlock()
	must.Eq(t, 1, pass())
	must.Eq(t, 0, pass()) // a group to place is replayed, not looked at
	s.mu.Lock()
	n.Status, n.ModifyIndex = api.NodeStatusReady, 53
	s.state.PutNode(&n)
	s.mu.Unlock()
	must.Eq(t, 3+1, pass()) // and looked at again when any node changed
}

// collectReading runs collect as a pass does, during a read of the model
// without s.mu (reading.go). The caller holds s.mu, and holds it again
// on return.
func collectReading(l *loop, built *model.Built, shape uint64) ([]decide.Group, map[decide.Key]*api.Job, map[decide.Key]string, []decide.Action) {
	l.beginRead()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.endRead()
	}()
	out := l.collect(built, shape)
	return out.groups, out.jobs, out.pending, out.inPlace
}

// The nodes a group's rules allow are found again only when the nodes
// changed (nodeSetMemo): a new version of a job with the same rules is
// given the set the pass before found; a node that changed makes it found
// again, as does every pass with reuse off.
func TestNodeSetsAreFoundAgainOnlyWhenNodesChange(t *testing.T) {
	s := newTestService(t, benchCluster(t, 4, 1, 0))
	l := s.loop
	put := func(index uint64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		job := gated("a", 25)
		job.Constraints = []*api.Constraint{{LTarget: "${node.unique.name}", Operand: "!=", RTarget: "node-0003"}}
		job.ModifyIndex, job.JobModifyIndex = ptr(index), ptr(index)
		s.state.PutJob(job)
	}
	allowed := func() []string { // where a's group may go, as the pass hands it to the step
		s.mu.Lock()
		defer s.mu.Unlock()
		built := l.state.Snapshot(l.profile, nil)
		groups, _, _, _ := collectReading(l, built, clusterShape(built.Snapshot))
		for _, g := range groups {
			if g.Key.Job == "a" {
				return g.Req.Allowed
			}
		}
		t.Fatal("a's group is not decided")
		return nil
	}
	put(50)
	first := allowed()
	must.Eq(t, []string{"node-0000", "node-0001", "node-0002"}, first)
	put(51) // looked at again: the set is the one found before
	again := allowed()
	must.Eq(t, first, again)
	must.True(t, &first[0] == &again[0])

	s.mu.Lock()
	n := *s.state.Nodes["node-0001"]
	n.SchedulingEligibility, n.ModifyIndex = api.NodeSchedulingIneligible, 52
	s.state.PutNode(&n)
	s.mu.Unlock()
	changed := allowed()
	must.Eq(t, []string{"node-0000", "node-0002"}, changed)

	l.collectCache().full = true
	put(53)
	full := allowed()
	l.collectCache().full = false
	must.Eq(t, changed, full)
	must.False(t, &changed[0] == &full[0])
}
