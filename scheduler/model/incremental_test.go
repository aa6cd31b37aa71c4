package model

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// churn is a random cluster's life for the incremental snapshot to keep
// up with: nodes that leave and come back, drain or lose a GPU; plain
// allocations on shares of their own; pinned jobs (shares 50 and up of
// their GPU) whose allocations come, end, and are replaced by new
// versions; purges, preemptions in flight, learned profiles, what Nomad
// said of pins, a new trust in pin records, relists.
type churn struct {
	t     *testing.T
	rng   *rand.Rand
	s     *State
	index uint64
	next  map[string]int // GPU UUID -> next free share of the plain allocations
	gone  map[string]bool
	nodes map[[2]int]*api.Node
}

// node is liveNode(i, bad) at the current index, its fixture read once.
func (c *churn) node(i, bad int) *api.Node {
	k := [2]int{i, bad}
	if c.nodes[k] == nil {
		c.nodes[k] = liveNode(c.t, i, bad, 0)
	}
	n := *c.nodes[k]
	n.ModifyIndex = c.index
	return &n
}

const churnNodes, churnPinned = 4, 12

// pinnedJob is pinned job j at the current index: 10 shares of its own.
func (c *churn) pinnedJob(j int) *api.Job {
	node, gpu := j%churnNodes, (j/churnNodes)%4
	uuid := fmt.Sprintf("GPU-%d-%d", node, gpu)
	var shares []string
	for k := range 10 {
		shares = append(shares, fmt.Sprintf("%s:%d", uuid, 50+10*(j/(churnNodes*4))+k))
	}
	job := gatedJob(fmt.Sprintf("p%d", j), 10)
	job.ModifyIndex, job.JobModifyIndex = ptr(c.index), ptr(c.index)
	_, err := pin.Pin(job, "g", &placement.Decision{Request: fmt.Sprintf("default/p%d/g", j), Policy: "gpushare",
		Placements: []placement.Placement{{Node: fmt.Sprintf("n%d", node), GPUs: []string{uuid}, Shares: shares}}})
	must.NoError(c.t, err)
	return job
}

// pinnedAlloc is an allocation of pinned job j on its pinned shares.
func (c *churn) pinnedAlloc(j int) *api.Allocation {
	job := c.s.Jobs[JobKey("", fmt.Sprintf("p%d", j))]
	if job == nil {
		return nil
	}
	rec, ok := pin.ParseRecord(job, "g")
	if !ok {
		return nil
	}
	a := shareAlloc(fmt.Sprintf("p%d-%d", j, c.index), fmt.Sprintf("p%d", j), rec.Nodes[0], 0, 0)
	a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs = rec.Shares
	a.ModifyIndex, a.CreateIndex = c.index, c.index
	return a
}

// step changes the state one random way.
func (c *churn) step(step int) {
	c.index++
	s, rng := c.s, c.rng
	switch op := rng.IntN(15); op {
	case 0: // a node leaves or comes back
		id := fmt.Sprintf("n%d", rng.IntN(churnNodes))
		if _, ok := s.Nodes[id]; ok {
			s.DeleteNodeAt(id, c.index)
		} else {
			s.PutNode(c.node(int(id[1]-'0'), -1))
		}
	case 1: // drained, or a GPU turns unhealthy
		n := c.node(rng.IntN(churnNodes), rng.IntN(5)-1)
		n.Drain = rng.IntN(4) == 0
		s.PutNode(n)
	case 2: // a plain allocation of 10 shares, or of 5 on two GPUs (the plugin would refuse it)
		i, g := rng.IntN(churnNodes), rng.IntN(4)
		uuids := []string{fmt.Sprintf("GPU-%d-%d", i, g)}
		if rng.IntN(4) == 0 {
			uuids = append(uuids, fmt.Sprintf("GPU-%d-%d", i, (g+1)%4))
		}
		var ids []string
		for _, uuid := range uuids {
			if c.next[uuid]+10/len(uuids) > 50 {
				return
			}
			for k := c.next[uuid]; k < c.next[uuid]+10/len(uuids); k++ {
				ids = append(ids, fmt.Sprintf("%s:%d", uuid, k))
			}
			c.next[uuid] += 10 / len(uuids)
		}
		a := shareAlloc(fmt.Sprintf("a%03d", step), fmt.Sprintf("j%d", rng.IntN(4)), fmt.Sprintf("n%d", i), 0, 0)
		a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs = ids
		a.ModifyIndex = c.index
		s.PutAlloc(a)
	case 3, 4: // a pinned job's allocation comes (the old ones end)
		j := rng.IntN(churnPinned)
		for _, old := range s.AllAllocs("", fmt.Sprintf("p%d", j), "g") {
			ended := *old
			ended.ClientStatus, ended.ModifyIndex = api.AllocClientStatusComplete, c.index
			s.PutAlloc(&ended)
		}
		s.PutAlloc(c.pinnedAlloc(j))
	case 5: // an allocation ends
		ids := slices.Sorted(maps.Keys(s.Allocs))
		if len(ids) == 0 {
			return
		}
		a := *s.Allocs[ids[rng.IntN(len(ids))]]
		a.ClientStatus, a.ModifyIndex = []string{api.AllocClientStatusComplete, api.AllocClientStatusFailed}[rng.IntN(2)], c.index
		s.PutAlloc(&a)
	case 6: // a pinned job is registered anew, gated again or stopped
		job := c.pinnedJob(rng.IntN(churnPinned))
		switch rng.IntN(4) {
		case 0:
			job = gatedJob(*job.ID, 10)
			job.ModifyIndex, job.JobModifyIndex = ptr(c.index), ptr(c.index)
		case 1:
			job.Stop = ptr(true)
		}
		s.PutJob(job)
	case 7: // a plain job's class changes its allocations' attributes
		job := gatedJob(fmt.Sprintf("j%d", rng.IntN(4)), 10)
		job.TaskGroups[0].Constraints = nil
		job.Meta = map[string]string{pin.MetaClass: []string{"production", "opportunistic", ""}[rng.IntN(3)]}
		job.ModifyIndex = ptr(c.index)
		s.PutJob(job)
	case 8: // a purge
		if rng.IntN(2) == 0 {
			s.DeleteJob("default", fmt.Sprintf("p%d", rng.IntN(churnPinned)))
		} else {
			s.DeleteJobAt("default", fmt.Sprintf("j%d", rng.IntN(4)), c.index)
		}
	case 9: // a preemption in flight, or over
		ids := slices.Sorted(maps.Keys(s.Allocs))
		if len(ids) > 0 {
			id := ids[rng.IntN(len(ids))]
			c.gone[id] = !c.gone[id]
		}
	case 10: // a learned profile
		s.Learn(fmt.Sprintf("default/p%d/g", rng.IntN(churnPinned)), interference.Profile{Name: "learned", SM: rng.Float64(), MemBW: rng.Float64()})
	case 11: // Nomad could not place a pin, or placed it
		c.eval(rng.IntN(churnPinned))
	case 12: // the trust in pin records changes (now and then: it has everything looked at again)
		if rng.IntN(4) > 0 {
			c.eval(rng.IntN(churnPinned))
			return
		}
		s.ForgetParsed()
	case 13: // a relist that lacks one allocation
		c.relist()
	case 14: // a profile learned no more
		s.Unlearn(fmt.Sprintf("default/p%d/g", rng.IntN(churnPinned)))
	}
}

// eval is an evaluation of pinned job j's current version.
func (c *churn) eval(j int) {
	job := c.s.Jobs[JobKey("", fmt.Sprintf("p%d", j))]
	if job == nil {
		return
	}
	e := &api.Evaluation{ID: fmt.Sprint(c.index), Namespace: "default", JobID: *job.ID, JobModifyIndex: *job.JobModifyIndex, Status: api.EvalStatusComplete}
	if c.rng.IntN(2) == 0 {
		e.FailedTGAllocs = map[string]*api.AllocationMetric{"g": {NodesEvaluated: 1, NodesFiltered: 1}}
	}
	c.s.PutEval(e)
}

// relist lists the state as it is, but for one allocation.
func (c *churn) relist() {
	s := c.s
	l := &Listing{NodesIndex: c.index, JobsIndex: c.index, AllocsIndex: c.index}
	for _, id := range slices.Sorted(maps.Keys(s.Nodes)) {
		l.Nodes = append(l.Nodes, s.Nodes[id])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Jobs)) {
		l.Jobs = append(l.Jobs, s.Jobs[k])
	}
	ids := slices.Sorted(maps.Keys(s.Allocs))
	skip := -1
	if len(ids) > 0 {
		skip = c.rng.IntN(len(ids))
	}
	for i, id := range ids {
		if i != skip {
			l.Allocs = append(l.Allocs, s.Allocs[id])
		}
	}
	s.Relist(l)
}

// The snapshot the state keeps in step from what changed is, after any
// sequence of changes, the snapshot a build from scratch makes: the same
// nodes, allocations, holds of pinned groups, short groups and problems.
func TestIncrementalSnapshotMatchesAFreshBuild(t *testing.T) {
	for seed := range uint64(4) {
		c := &churn{t: t, rng: rand.New(rand.NewPCG(seed, 17)), s: New(), index: 1, next: map[string]int{}, gone: map[string]bool{}, nodes: map[[2]int]*api.Node{}}
		goneFn := func(id string) bool { return c.gone[id] }
		for i := range churnNodes {
			c.s.PutNode(c.node(i, -1))
		}
		for j := range churnPinned {
			c.s.PutJob(c.pinnedJob(j))
		}
		for step := range 600 {
			c.step(step)
			if c.rng.IntN(3) == 0 && step < 599 {
				continue // several changes between two snapshots
			}
			got := c.s.Snapshot(nil, goneFn)
			fresh := New()
			fresh.Nodes, fresh.Jobs, fresh.Allocs, fresh.Learned = c.s.Nodes, c.s.Jobs, c.s.Allocs, c.s.Learned
			fresh.priors, fresh.verdicts = c.s.priors, c.s.verdicts
			want := fresh.Snapshot(nil, goneFn)
			at := must.Sprintf("seed %d step %d", seed, step)
			sameBuilt(t, want, got, at)
			must.Eq(t, fresh.indexes.groups(fresh.Allocs), c.s.indexes.groups(c.s.Allocs), at) // the allocations by group, kept in step
			indexed := 0                                                                       // and by job
			for k, ids := range c.s.indexes.byJob {
				for id := range ids {
					must.Eq(t, k, JobKey(c.s.Allocs[id].Namespace, c.s.Allocs[id].JobID), at)
					indexed++
				}
			}
			must.Eq(t, len(c.s.Allocs), indexed, at)
			for _, a := range c.s.Allocs { // what the snapshot keeps of each allocation
				must.Eq(t, got.Snapshot.Reservable(Shares(a)), c.s.Reservable(got.Snapshot, a), at)
				must.Eq(t, Shares(a), c.s.SharesOf(a), at)
			}
		}
	}
}

// sameBuilt checks that two builds hold the same.
func sameBuilt(t *testing.T, want, got *Built, at must.Setting) {
	t.Helper()
	must.Eq(t, want.Snapshot.Allocs(), got.Snapshot.Allocs(), at)
	must.Eq(t, want.HeldFor, got.HeldFor, at)
	must.Eq(t, want.Short, got.Short, at)
	must.Eq(t, slices.Sorted(slices.Values(want.Problems)), slices.Sorted(slices.Values(got.Problems)), at)
	wu, gu := want.Snapshot.Usage(), got.Snapshot.Usage()
	must.InDelta(t, wu.AllocatedGPUs, gu.AllocatedGPUs, 1e-9)
	wu.AllocatedGPUs, gu.AllocatedGPUs = 0, 0 // summed in another order
	must.Eq(t, wu, gu, at)
	must.Eq(t, downs(want.Snapshot), downs(got.Snapshot), at)
	// (no Snapshot.Check: the churn puts allocations the plugin would
	// refuse, spread over two GPUs, which Check reports)
}

// A pass with many changed jobs looks at them side by side (wantHolds):
// with every job a part of its own, the incremental snapshot still
// matches a fresh build (and, under -race, the goroutines only read).
func TestIncrementalSnapshotMatchesAFreshBuildSideBySide(t *testing.T) {
	defer func(per, procs int) { wantHoldsPerWorker = per; runtime.GOMAXPROCS(procs) }(wantHoldsPerWorker, runtime.GOMAXPROCS(4))
	wantHoldsPerWorker = 1
	must.Eq(t, 4, holdWorkers(churnPinned))
	TestIncrementalSnapshotMatchesAFreshBuild(t)
}

// The jobs of a large pass are split between the processors, a few are
// looked at by one goroutine.
func TestManyChangedJobsAreLookedAtSideBySide(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	must.Eq(t, 1, holdWorkers(0))
	must.Eq(t, 1, holdWorkers(wantHoldsPerWorker))
	must.Eq(t, 2, holdWorkers(20000))
}
