package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Elastic groups against the fake Nomad and the injected clock: the
// scaling events the fake keeps are what a restarted scheduler reads
// back.

// Scale is Nomad's scale endpoint (Job.Scale in nomad/job_endpoint.go):
// the count within the scaling block's min and max, the job's modify
// index enforced, a new version of the job, and a scaling event first in
// the group's list.
func (f *fakeNomad) Scale(_ context.Context, _, jobID, group string, count int, index uint64, message string, meta map[string]any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[jobID]
	if j == nil {
		return fmt.Errorf("job %q not found", jobID)
	}
	if index != 0 && *j.JobModifyIndex != index {
		return ErrConflict
	}
	c, _ := copyJob(j)
	tg := pin.Group(c, group)
	if sc := tg.Scaling; sc != nil && (sc.Min != nil && int64(count) < *sc.Min || sc.Max != nil && int64(count) > *sc.Max) {
		return fmt.Errorf("Unexpected response code: 400 (group count %d outside the scaling block's min and max)", count)
	}
	prev := pin.Count(tg)
	tg.Count = ptr(count)
	f.putLocked(c)
	b, _ := json.Marshal(meta) // what Nomad's API hands back
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	ev := &api.ScalingEvent{Count: ptr(int64(count)), PreviousCount: int64(prev), Message: message, Meta: m, CreateIndex: f.index}
	if f.scaleNow != nil {
		ev.Time = uint64(f.scaleNow().UnixNano())
	}
	if f.scaleEvents == nil {
		f.scaleEvents = map[string]map[string][]*api.ScalingEvent{}
	}
	if f.scaleEvents[jobID] == nil {
		f.scaleEvents[jobID] = map[string][]*api.ScalingEvent{}
	}
	f.scaleEvents[jobID][group] = append([]*api.ScalingEvent{ev}, f.scaleEvents[jobID][group]...)
	f.scales = append(f.scales, fmt.Sprintf("%s/%s %d->%d", jobID, group, prev, count))
	return nil
}

func (f *fakeNomad) ScaleEvents(_ context.Context, _, jobID string) (map[string][]*api.ScalingEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]*api.ScalingEvent{}
	for g, evs := range f.scaleEvents[jobID] {
		out[g] = slices.Clone(evs)
	}
	return out, nil
}

// scaleCalls lists the Scale calls so far.
func (f *fakeNomad) scaleCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.scales)
}

// elasticJob is a gated job of one group of shares per allocation, count
// allocations, that opts in (gpushare.elastic = optIn, none when "") with
// a scaling block of min and max.
func elasticJob(id string, shares uint64, count, min, max int, optIn string) *api.Job {
	j := gated(id, shares)
	tg := j.TaskGroups[0]
	tg.Count = ptr(count)
	if optIn != "" {
		tg.Meta[MetaElastic] = optIn
	}
	tg.Scaling = &api.ScalingPolicy{Min: ptr(int64(min)), Max: ptr(int64(max)), Enabled: ptr(true)}
	return j
}

// placeNew has the fake Nomad place job id's missing allocations (group g
// on node-1), as it does once the pin has room for them: each on shares
// of the pin that no live allocation of the job holds, named by index.
func (f *fakeNomad) placeNew(t *testing.T, id string, shares int) {
	t.Helper()
	f.mu.Lock()
	j := f.jobs[id]
	f.mu.Unlock()
	rec, ok := pin.ParseRecord(j, "g")
	must.True(t, ok, must.Sprint("job ", id, " is pinned"))
	for idx := range pin.Count(pin.Group(j, "g")) {
		name := fmt.Sprintf("%s.g[%d]", id, idx)
		held := map[string]bool{}
		found := false
		f.mu.Lock()
		for _, a := range f.allocs {
			if a.JobID == id && a.DesiredStatus == "run" && a.ClientStatus == "running" {
				found = found || a.Name == name
				for _, sh := range a.AllocatedResources.Tasks["t"].Devices[0].DeviceIDs {
					held[sh] = true
				}
			}
		}
		f.mu.Unlock()
		if found {
			continue
		}
		var mine []string
		for _, sh := range rec.Shares {
			if !held[sh] && len(mine) < shares {
				mine = append(mine, sh)
			}
		}
		must.Eq(t, shares, len(mine), must.Sprint("the pin of ", id, " has room for allocation ", idx))
		f.setAlloc(id, fmt.Sprintf("%s-%d", id, idx), "node-1", mine, "running", "run")
		f.mu.Lock()
		f.allocs[len(f.allocs)-1].Name = name
		f.mu.Unlock()
	}
}

// stopAbove has the fake Nomad stop job id's allocations of index count
// and above, as it does when the count goes down, and update the others
// in place to the job's version.
func (f *fakeNomad) stopAbove(id string, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.allocs {
		if a.JobID != id || a.DesiredStatus != "run" {
			continue
		}
		f.index++
		a.ModifyIndex, a.AllocModifyIndex = f.index, f.index
		if allocIndex(a.Name) >= count {
			a.DesiredStatus, a.ClientStatus = "stop", "complete"
		}
	}
}

// pass has the service see what Nomad holds and decide once.
func pass(t *testing.T, s *Service) {
	t.Helper()
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
}

// settle runs the passes that follow a resize of job id: the scheduler
// pins its new count, Nomad places what is missing and stops what is
// above it, and a pass finds the group as it now runs.
func settle(t *testing.T, f *fakeNomad, s *Service, id string, shares int) {
	t.Helper()
	pass(t, s) // a grown group is pinned again for its new count
	f.mu.Lock()
	count := pin.Count(pin.Group(f.jobs[id], "g"))
	f.mu.Unlock()
	f.stopAbove(id, count)
	f.placeNew(t, id, shares)
	pass(t, s)
}

// elasticOf is what /v1/jobs/<id> says of job id's elastic group.
func elasticOf(t *testing.T, s *Service, id string) *ElasticStatus {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/jobs/"+id, nil))
	must.Eq(t, 200, rr.Code)
	var st JobStatus
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), &st))
	for _, g := range st.Groups {
		if g.Name == "g" {
			return g.Elastic
		}
	}
	return nil
}

// elasticCluster is a DGX-1 whose GPUs 1 to 7 run job b, and a service on
// a clock the test moves that placed elastic job el (25 shares a
// allocation, registered at count, scaling min and max) on GPU 0, where
// its allocations run.
func elasticCluster(t *testing.T, count, min, max int) (*fakeNomad, *Service, *fakeClock) {
	t.Helper()
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "b", []int{1, 2, 3, 4, 5, 6, 7}, 0, "2h")
	f.put(elasticJob("el", 25, count, min, max, "true"))
	s, clock := clockedService(t, f)
	f.scaleNow = clock.now
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, f.scaleCalls(), must.Sprint("not resized before it runs"))
	f.placeNew(t, "el", 25)
	return f, s, clock
}

// A group that opts in grows into idle shares one allocation at a time,
// at most once per interval, through Nomad's scale API with a message
// that names gpushare and why, up to its max; the API and the metric say
// so. Without gpushare.elastic, a group with the same scaling block is
// never resized.
func TestElasticGrowsIntoIdleSharesUpToMax(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(elasticJob("el", 25, 1, 1, 3, "yes"))
	f.put(elasticJob("plain", 25, 1, 1, 3, ""))
	s, clock := clockedService(t, f)
	f.scaleNow = clock.now
	s.loop.reconcile(t.Context())
	f.placeNew(t, "el", 25)
	f.placeNew(t, "plain", 25)

	pass(t, s)
	must.Eq(t, []string{"el/g 1->2"}, f.scaleCalls())
	ev := f.scaleEvents["el"]["g"][0]
	must.StrContains(t, ev.Message, "gpushare: grown from 1 to 2: idle shares hold one more")
	must.Eq(t, "1", ev.Meta[metaRegistered])
	settle(t, f, s, "el", 25)
	must.Eq(t, 2, pin.Count(pin.Group(f.jobs["el"], "g")))
	must.Eq(t, []string{"el/g 1->2"}, f.scaleCalls(), must.Sprint("not again within the interval"))
	st := elasticOf(t, s, "el")
	must.NotNil(t, st)
	must.True(t, st.Managed)
	must.Eq(t, 1, st.Registered)
	must.Eq(t, 2, st.Count)
	must.StrContains(t, st.Why, "resizes at most once every 1m0s")
	must.Eq(t, "grow", st.Last.Direction)
	must.StrContains(t, st.Last.Reason, "grown from 1 to 2")

	clock.add(time.Minute)
	pass(t, s)
	must.Eq(t, []string{"el/g 1->2", "el/g 2->3"}, f.scaleCalls())
	settle(t, f, s, "el", 25)
	clock.add(time.Minute)
	pass(t, s)
	must.Eq(t, []string{"el/g 1->2", "el/g 2->3"}, f.scaleCalls(), must.Sprint("at its max"))
	must.StrContains(t, elasticOf(t, s, "el").Why, "at its maximum (max = 3)")
	must.Eq(t, 3, elasticOf(t, s, "el").Registered+2)
	must.Nil(t, elasticOf(t, s, "plain"))
	must.Eq(t, 2.0, counterValue(t, s, `gpushare_elastic_resizes_total{direction="grow"}`))
	must.Eq(t, 0.0, counterValue(t, s, `gpushare_elastic_resizes_total{direction="shrink"}`))
}

// While a group that could use the shares it would take waits for room,
// no elastic group grows (even where the waiting group does not fit yet);
// once none waits, it grows.
func TestElasticDoesNotGrowWhileAGroupWaits(t *testing.T) {
	f, s, _ := elasticCluster(t, 1, 1, 3)
	f.put(gated("big", 200)) // two whole GPUs: none is free
	pass(t, s)
	must.MapContainsKey(t, s.loop.answers.pending, key("big"))
	must.SliceEmpty(t, f.scaleCalls())
	must.StrContains(t, elasticOf(t, s, "el").Why, "does not grow while a group that could use the shares it would take waits for room (default/big/g, on node node-1)")

	f.mu.Lock()
	delete(f.jobs, "big")
	f.mu.Unlock()
	pass(t, s)
	must.Eq(t, []string{"el/g 1->2"}, f.scaleCalls())
}

// A group that waits for room where an elastic group's growth would not
// take any (another node, which its rules alone allow) does not hold the
// elastic group back.
func TestElasticGrowsBesideAGroupThatWaitsElsewhere(t *testing.T) {
	f := &fakeNomad{nodes: twoDGX1(t), jobs: map[string]*api.Job{}}
	busy := gated("b2", 800)
	busy.TaskGroups[0].Constraints = nil
	f.put(busy)
	n2, err := model.NodeOf(f.nodes[1])
	must.NoError(t, err)
	var all []string
	for _, g := range n2.GPUs {
		for k := range g.Shares {
			all = append(all, devicefn.ShareID{UUID: g.UUID, Index: k}.String())
		}
	}
	f.setAlloc("b2", "alloc-b2", "node-2", all, "running", "run")
	f.put(elasticJob("el", 25, 1, 1, 3, "true"))
	s, clock := clockedService(t, f)
	f.scaleNow = clock.now
	s.loop.reconcile(t.Context())
	f.placeNew(t, "el", 25)
	there := gated("there", 25) // only node-2, which is full
	there.TaskGroups[0].Constraints = append(there.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${node.unique.id}", RTarget: "node-2", Operand: "="})
	f.put(there)
	pass(t, s)
	must.StrContains(t, s.loop.answers.pending[key("there")], "position 1 of 1 in the queue") // the step left it waiting
	must.Eq(t, []string{"el/g 1->2"}, f.scaleCalls())
	must.StrContains(t, f.scaleEvents["el"]["g"][0].Message, "no group that could use them waits")
}

// A waiting group that fits on the shares an elastic group grew into
// shrinks it, newest allocations first (Nomad stops the highest-indexed),
// by as many as it needs and no more, through the scale API with a
// message that names the waiting group; the waiting group is then placed
// there, and nothing grows meanwhile.
func TestElasticShrinksNewestFirstForAWaitingGroup(t *testing.T) {
	f, s, clock := elasticCluster(t, 1, 1, 4)
	for range 3 {
		pass(t, s)
		settle(t, f, s, "el", 25)
		clock.add(time.Minute)
	}
	must.Eq(t, []string{"el/g 1->2", "el/g 2->3", "el/g 3->4"}, f.scaleCalls())

	f.put(gated("w", 50)) // GPU 0 is full: el's allocations 2 and 3 hold what it needs
	pass(t, s)
	must.Eq(t, "el/g 4->2", f.scaleCalls()[3])
	must.SliceLen(t, 4, f.scaleCalls())
	ev := f.scaleEvents["el"]["g"][0]
	must.StrContains(t, ev.Message, "gpushare: shrunk from 4 to 2: default/w/g waits for the shares its newest allocation(s) hold")
	must.Eq(t, "1", ev.Meta[metaRegistered])
	st := elasticOf(t, s, "el")
	must.Eq(t, "shrink", st.Last.Direction)
	must.Eq(t, 1, st.Registered)
	must.Eq(t, 1.0, counterValue(t, s, `gpushare_elastic_resizes_total{direction="shrink"}`))
	page := uiServe(s, "GET", "/ui/jobs/el?namespace=default", "", nil)
	must.Eq(t, 200, page.Code)
	must.StrContains(t, page.Body.String(), "<dt>Last resize</dt>")
	must.StrContains(t, page.Body.String(), "shrunk from 4 to 2: default/w/g waits for the shares its newest allocation(s) hold")

	pass(t, s) // the scheduler sees count 2 before Nomad stopped the two: not shrunk again
	must.SliceLen(t, 4, f.scaleCalls())
	f.stopAbove("el", 2)
	pass(t, s)
	_, pinned := pin.ParseRecord(f.jobs["w"], "g")
	must.True(t, pinned, must.Sprint(s.loop.answers.pending[key("w")]))
	for _, a := range f.allocs {
		if a.JobID == "el" && a.DesiredStatus == "run" {
			must.True(t, allocIndex(a.Name) < 2, must.Sprint("the oldest two run on: ", a.Name))
		}
	}
	clock.add(time.Minute)
	pass(t, s)
	must.SliceLen(t, 4, f.scaleCalls(), must.Sprint("nothing grows while w waits for Nomad"))
}

// A group is never shrunk below the count its user registered, nor below
// its min: a waiting group that would fit only then waits.
func TestElasticNeverShrinksBelowTheRegisteredCount(t *testing.T) {
	f, s, clock := elasticCluster(t, 2, 1, 4)
	for range 2 {
		pass(t, s)
		settle(t, f, s, "el", 25)
		clock.add(time.Minute)
	}
	must.Eq(t, []string{"el/g 2->3", "el/g 3->4"}, f.scaleCalls())
	must.Eq(t, 2, elasticOf(t, s, "el").Registered)

	f.put(gated("w", 75)) // would fit were el shrunk to 1; it was registered at 2
	pass(t, s)
	must.SliceLen(t, 2, f.scaleCalls())
	must.MapContainsKey(t, s.loop.answers.pending, key("w"))

	f.mu.Lock()
	delete(f.jobs, "w")
	f.mu.Unlock()
	f.put(gated("w2", 50)) // fits on the two grown allocations
	pass(t, s)
	must.Eq(t, "el/g 4->2", f.scaleCalls()[2])
}

// A group whose scaling block has a policy is the Nomad Autoscaler's: it
// is never resized, and its status says so.
func TestElasticLeavesAnAutoscalerGroupAlone(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	j := elasticJob("auto", 25, 1, 1, 3, "true")
	j.TaskGroups[0].Scaling.Policy = map[string]any{"check": map[string]any{"util": map[string]any{"source": "prometheus"}}}
	f.put(j)
	s, clock := clockedService(t, f)
	f.scaleNow = clock.now
	s.loop.reconcile(t.Context())
	f.placeNew(t, "auto", 25)
	for range 3 {
		clock.add(time.Minute)
		pass(t, s)
	}
	must.SliceEmpty(t, f.scaleCalls())
	st := elasticOf(t, s, "auto")
	must.NotNil(t, st)
	must.False(t, st.Managed)
	must.StrContains(t, st.Why, "left to the Nomad Autoscaler")
}

// A grown allocation Nomad does not place within an interval is given
// back: the group shrinks to where it was.
func TestElasticShrinksBackAGrowthNomadDidNotPlace(t *testing.T) {
	f, s, clock := elasticCluster(t, 1, 1, 3)
	pass(t, s)
	must.Eq(t, []string{"el/g 1->2"}, f.scaleCalls())
	pass(t, s) // pinned again for 2; Nomad places nothing
	pass(t, s)
	must.SliceLen(t, 1, f.scaleCalls(), must.Sprint("given an interval"))
	clock.add(time.Minute)
	pass(t, s)
	must.Eq(t, []string{"el/g 1->2", "el/g 2->1"}, f.scaleCalls())
	must.StrContains(t, f.scaleEvents["el"]["g"][0].Message, "the allocation it grew by was not placed")
}

// A restarted scheduler reads back from Nomad's scaling events what the
// last one did: the count the user registered (so it shrinks no further),
// the last resize and its reason, and when (so it does not resize again
// within the interval).
func TestElasticRestartedSchedulerAgrees(t *testing.T) {
	f, s, clock := elasticCluster(t, 1, 1, 4)
	pass(t, s)
	settle(t, f, s, "el", 25)
	clock.add(time.Minute)
	pass(t, s)
	settle(t, f, s, "el", 25)
	must.Eq(t, []string{"el/g 1->2", "el/g 2->3"}, f.scaleCalls())

	again, clock2 := clockedService(t, f)
	clock2.at = clock.now()
	clock2.add(30 * time.Second)
	f.scaleNow = clock2.now
	again.loop.reconcile(t.Context())
	must.SliceLen(t, 2, f.scaleCalls(), must.Sprint("within the interval of the last resize"))
	st := elasticOf(t, again, "el")
	must.Eq(t, 1, st.Registered)
	must.Eq(t, 3, st.Count)
	must.StrContains(t, st.Last.Reason, "grown from 2 to 3")
	must.StrContains(t, st.Why, "resized 30s ago")

	f.put(gated("w", 100)) // the whole GPU: would need el at 0
	pass(t, again)
	must.SliceLen(t, 2, f.scaleCalls(), must.Sprint("not below the registered count"))
	f.mu.Lock()
	delete(f.jobs, "w")
	f.mu.Unlock()
	f.put(gated("w2", 50)) // fits on the newest allocation's shares and the free 25
	pass(t, again)
	must.Eq(t, "el/g 3->2", f.scaleCalls()[2])
}

// A replica without the leader lease resizes nothing, and says so.
func TestElasticLeaderlessDoesNotScale(t *testing.T) {
	f, s, clock := elasticCluster(t, 1, 1, 3)
	s.lease.need.Store(true) // campaigns, holds no lease
	clock.add(time.Minute)
	pass(t, s)
	must.SliceEmpty(t, f.scaleCalls())
	must.StrContains(t, elasticOf(t, s, "el").Why, "this replica does not lead")
}

// A group that opts in but cannot be resized says why, and is not:
// no scaling block, a disabled one, a value of gpushare.elastic gpushare
// does not know. One that opts out says nothing.
func TestElasticSaysWhyItDoesNotResize(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	bare := elasticJob("bare", 25, 1, 1, 3, "true")
	bare.TaskGroups[0].Scaling = nil
	off := elasticJob("off", 25, 1, 1, 3, "true")
	off.TaskGroups[0].Scaling.Enabled = ptr(false)
	odd := elasticJob("odd", 25, 1, 1, 3, "maybe")
	no := elasticJob("no", 25, 1, 1, 3, "false")
	for _, j := range []*api.Job{bare, off, odd, no} {
		f.put(j)
	}
	s, clock := clockedService(t, f)
	f.scaleNow = clock.now
	s.loop.reconcile(t.Context())
	for _, id := range []string{"bare", "off", "odd", "no"} {
		f.placeNew(t, id, 25)
	}
	clock.add(time.Minute)
	pass(t, s)
	must.SliceEmpty(t, f.scaleCalls())
	must.StrContains(t, elasticOf(t, s, "bare").Why, "has no scaling block")
	must.StrContains(t, elasticOf(t, s, "off").Why, "disabled (enabled = false)")
	must.StrContains(t, elasticOf(t, s, "odd").Why, `gpushare.elastic = "maybe" is not a value gpushare knows`)
	must.Nil(t, elasticOf(t, s, "no"))
}
