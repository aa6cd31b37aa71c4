package service

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A follower that started before the leader made the signing key trusts
// the placements the leader signs once it reads the key: the pinned group
// without an allocation holds its shares (after a failover, the new
// leader gives them to no other group).
func TestKeyLoadedLaterTrustsSignedPlacements(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	follower, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, follower.watcher.resync(t.Context()))
	must.NoError(t, follower.records.loadSecret(t.Context(), false)) // no key yet
	must.NoError(t, follower.records.loadState(t.Context(), true))

	leader := loadedService(t, f) // makes the key
	leader.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["x"]))
	must.NoError(t, follower.watcher.resync(t.Context()))
	_, trusted := follower.state.Record(f.jobs["x"], "g")
	must.False(t, trusted) // no key to verify it with
	must.MapEmpty(t, follower.state.Snapshot(nil, nil).HeldFor)

	must.NoError(t, follower.records.loadSecret(t.Context(), false))
	_, trusted = follower.state.Record(f.jobs["x"], "g")
	must.True(t, trusted)
	held := follower.state.Snapshot(nil, nil).HeldFor
	must.MapLen(t, 1, held)
	must.True(t, slices.Contains(slices.Collect(maps.Values(held)), key("x")))
}

// clocked is loadedService with a clock the test moves.
func clocked(t *testing.T, f *fakeNomad, now *time.Time) *Service {
	t.Helper()
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return *now })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	must.NoError(t, s.records.loadSecret(t.Context(), true))
	must.NoError(t, s.records.loadState(t.Context(), true))
	return s
}

// longGroup is group i of a scene at Nomad's limits: a 128-character
// namespace (the longest Nomad accepts), a 512-character job ID (Nomad
// sets no limit; longer than any real one) and a 128-character group.
func longGroup(i int) (*api.Job, decide.Key) {
	job := gated(fmt.Sprintf("%04d-", i)+strings.Repeat("j", 507), 25)
	job.Namespace = ptr(strings.Repeat("n", 128))
	job.TaskGroups[0].Name = ptr(strings.Repeat("g", 128))
	job.ModifyIndex, job.JobModifyIndex = ptr(uint64(i+1)), ptr(uint64(i+1))
	return job, model.KeyOf(job, *job.TaskGroups[0].Name)
}

// Every kind of record is split by its size into Variables Nomad accepts
// (the fake refuses one over 64 KiB, as Nomad does): 3000 groups with the
// longest names, each waiting with a long reason, with a learned profile,
// a preemption in flight, a kept submit time, and introspection's records
// full. A group whose
// record alone is larger than a Variable loses that record, no other. A
// replica reads them all back; when the jobs go, the shards no longer
// needed are deleted.
func TestRecordsStayWithinNomadsLimit(t *testing.T) {
	const groups = 3000
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	now := time.Unix(1000, 0)
	s := clocked(t, f, &now)
	learned := func(k decide.Key) interference.Profile {
		return interference.Profile{Name: model.LearnedName(k.String()), SM: 0.123456789, MemBW: 0.987654321}
	}
	s.mu.Lock()
	var keys []decide.Key
	for i := range groups {
		job, k := longGroup(i)
		s.state.PutJob(job)
		keys = append(keys, k)
		s.loop.answers.pending[k] = strings.Repeat("waits ", 100) // cut at maxReason
		s.state.Learn(k.String(), interference.Profile{Name: "learned", SM: 0.123456789, MemBW: 0.987654321})
		s.loop.preempted[fmt.Sprintf("%08d-1111-2222-3333-444444444444", i)] = now
		s.records.submitted[model.JobKey(k.Namespace, k.Job)] = submitted{index: *job.JobModifyIndex, at: now.UnixNano()}
		s.loop.intro.rec.noteUnpaired(k, strings.Repeat("slow ", 100), now.Add(time.Duration(i)*time.Second))
		if i > 0 {
			s.loop.intro.observe("Tesla V100-SXM2-16GB", learned(k), learned(keys[i-1]), 0.5)
			s.loop.intro.markIncompatible("Tesla V100-SXM2-16GB", learned(k), learned(keys[i-1]))
		}
	}
	huge := gated(strings.Repeat("h", 70<<10), 25)
	huge.ModifyIndex = ptr(uint64(groups + 1))
	s.state.PutJob(huge)
	hugeKey := model.KeyOf(huge, "g")
	s.loop.answers.pending[hugeKey] = "waits"
	s.mu.Unlock()
	s.records.saveState(t.Context())

	largest, shards := 0, map[string]int{}
	for path, items := range f.vars {
		largest = max(largest, varSize(items))
		for _, k := range []kind{reasonsKind, learnedKind, preemptedKind, introspectionKind, submittedKind} {
			if k.owns(path) {
				shards[k.name]++
			}
		}
	}
	t.Logf("largest variable: %d bytes; shards: %v", largest, shards)
	must.Less(t, maxVariableSize, largest)
	must.LessEq(t, shardBudget, largest)
	must.Greater(t, 5, shards["reasons"])
	must.Greater(t, 2, shards["learned"])
	must.Greater(t, 1, shards["preempted"])
	must.Greater(t, 1, shards["introspection"])
	must.Greater(t, 1, shards["submitted"])

	next := clocked(t, f, &now)
	must.MapLen(t, groups, next.loop.answers.pending)
	must.MapNotContainsKey(t, next.loop.answers.pending, hugeKey)
	must.MapLen(t, groups, next.state.Learned)
	must.MapLen(t, groups, next.loop.preempted)
	must.MapLen(t, groups, next.records.submitted)
	must.MapLen(t, maxUnpaired, next.loop.intro.rec.unpaired)
	must.SliceLen(t, maxPairObs, next.loop.intro.rec.obs)
	must.SliceLen(t, maxBadPairs, next.loop.intro.rec.bad)
	for _, k := range keys[groups-3:] {
		must.StrContains(t, next.loop.answers.pending[k], "waits waits")
		must.True(t, next.loop.intro.know.Incompatible("Tesla V100-SXM2-16GB", learned(k), learned(keys[slices.Index(keys, k)-1])))
	}

	// the jobs go: the records shrink back into one Variable per kind
	s.mu.Lock()
	for _, k := range keys[1:] {
		s.state.DeleteJob(k.Namespace, k.Job)
		delete(s.loop.answers.pending, k)
	}
	s.state.DeleteJob(hugeKey.Namespace, hugeKey.Job)
	delete(s.loop.answers.pending, hugeKey)
	clear(s.loop.preempted)
	s.mu.Unlock()
	now = now.Add(reasonsEvery)
	s.records.saveState(t.Context())
	for path, items := range f.vars {
		must.MapNotContainsKey(t, items, shardsItem, must.Sprint(path))
	}
	must.MapContainsKeys(t, f.vars, []string{reasonsKind.path(0), learnedKind.path(0), submittedKind.path(0)})
	must.MapLen(t, 4, f.vars) // and the signing key: nothing else is left
	again := clocked(t, f, &now)
	must.MapLen(t, 1, again.loop.answers.pending)
	must.MapLen(t, 1, again.state.Learned)
}

// Job "a/b" group "c" and job "a" group "b/c" are two groups to the
// scheduler: each pinned one holds its own shares until its allocation
// appears, and each has its own learned profile.
func TestGroupsWithSlashesAreTwo(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	ab, a := gated("a/b", 100), gated("a", 100)
	ab.TaskGroups[0].Name, a.TaskGroups[0].Name = ptr("c"), ptr("b/c")
	f.put(ab)
	f.put(a)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["a/b"]))
	must.SliceEmpty(t, pin.Gated(f.jobs["a"]))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	defer s.mu.Unlock()
	built := s.state.Snapshot(nil, nil)
	must.SliceEmpty(t, built.Problems)
	must.MapLen(t, 2, built.HeldFor)
	held := slices.Collect(maps.Values(built.HeldFor))
	must.SliceContainsAll(t, []decide.Key{{Namespace: "default", Job: "a/b", Group: "c"}, {Namespace: "default", Job: "a", Group: "b/c"}}, held)

	s.state.Learn(pin.GroupKey(f.jobs["a/b"], "c"), interference.Profile{Name: "learned", SM: 0.2, MemBW: 0.1})
	s.state.Learn(pin.GroupKey(f.jobs["a"], "b/c"), interference.Profile{Name: "learned", SM: 0.7, MemBW: 0.1})
	r1, err := s.state.Request(f.jobs["a/b"], "c", nil)
	must.NoError(t, err)
	r2, err := s.state.Request(f.jobs["a"], "b/c", nil)
	must.NoError(t, err)
	must.Eq(t, 0.2, r1.Profile.SM)
	must.Eq(t, 0.7, r2.Profile.SM)
}

// Records written before they were split by size, and before group keys
// were escaped, are read: the reasons from their 16 variables by hash
// (which the first save replaces with the new layout), a learned profile
// under the unescaped key of a periodic child's group.
func TestOldRecordsAreRead(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	child := gated("batch/periodic-1700000000", 1600) // waits for good: it has a reason
	f.put(child)
	k := decide.Key{Namespace: "default", Job: "batch/periodic-1700000000", Group: "g"}
	other := decide.Key{Namespace: "default", Job: "other", Group: "g"}
	f.vars = map[string]map[string]string{
		statePrefix + "reasons-03": {itemKey(k): groupItem(k, "pending", "old reason of the child")},
		statePrefix + "reasons-11": {itemKey(other): groupItem(other, "refused", "old reason of other")},
		statePrefix + "learned":    {"0123": `["default/batch/periodic-1700000000/g",0.3,0.2]`},
	}
	now := time.Unix(1000, 0)
	s := clocked(t, f, &now)
	must.Eq(t, "old reason of the child", s.loop.answers.pending[k])
	must.Eq(t, "old reason of other", s.loop.answers.pending[other])
	must.MapLen(t, 1, s.state.Learned)

	s.loop.reconcile(t.Context()) // saves the records in the new layout
	must.MapNotContainsKey(t, f.vars, statePrefix+"reasons-03")
	must.MapNotContainsKey(t, f.vars, statePrefix+"reasons-11")
	must.MapContainsKey(t, f.vars, statePrefix+"reasons-00")
	must.Eq(t, map[string]interference.Profile{k.String(): {Name: "learned", SM: 0.3, MemBW: 0.2}}, s.state.Learned)
	next := clocked(t, f, &now)
	must.MapContainsKey(t, next.loop.answers.pending, k)
	must.MapContainsKey(t, next.state.Learned, k.String())
}

// What the leader and a follower keep of jobs stays flat as jobs come and
// go: learned profiles, samples, preemptions, unpairings, submit times
// and what the interference knowledge observed go with their job, on the leader and,
// once it reads the leader's records, on the follower.
func TestChurnKeepsMemoryFlat(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	now := time.Unix(1000, 0)
	leader := clocked(t, f, &now)
	follower := clocked(t, f, &now)
	const gpu = "Tesla V100-SXM2-16GB"
	profile := func(i int) interference.Profile {
		return interference.Profile{Name: model.LearnedName(key(fmt.Sprintf("churn-%d", i)).String()), SM: 0.4, MemBW: 0.2}
	}
	sizes := func() map[string]int {
		leader.mu.Lock()
		defer leader.mu.Unlock()
		follower.mu.Lock()
		defer follower.mu.Unlock()
		return map[string]int{
			"leader learned": len(leader.state.Learned), "leader samples": len(leader.sampler.observations) + len(leader.loop.intro.alone),
			"leader knowledge": leader.loop.intro.know.cur().Len(), "leader preempted": len(leader.loop.preempted),
			"leader unpaired": len(leader.loop.intro.rec.unpaired), "leader obs": len(leader.loop.intro.rec.obs) + len(leader.loop.intro.rec.bad),
			"follower learned": len(follower.state.Learned), "follower knowledge": follower.loop.intro.know.cur().Len(),
			"follower preempted": len(follower.loop.preempted), "follower unpaired": len(follower.loop.intro.rec.unpaired),
			"leader submitted": len(leader.records.submitted), "follower submitted": len(follower.records.submitted),
		}
	}
	var after10, after60 map[string]int
	for i := range 60 {
		id := fmt.Sprintf("churn-%d", i)
		job := gated(id, 25)
		job.SubmitTime = ptr(now.UnixNano())
		f.put(job)
		must.NoError(t, leader.watcher.resync(t.Context()))
		leader.loop.reconcile(t.Context())
		rec, ok := pin.ParseRecord(f.jobs[id], "g")
		must.True(t, ok)
		f.index++
		f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "node-1",
			DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
		must.NoError(t, leader.watcher.resync(t.Context()))
		leader.mu.Lock()
		k := key(id)
		leader.state.Learn(k.String(), interference.Profile{Name: "learned", SM: 0.4, MemBW: 0.2})
		leader.sampler.observations[k.String()] = []interference.Observation{{SMUtilPct: 40, MemUtilPct: 20}}
		leader.loop.intro.alone[k.String()] = []float64{40}
		leader.loop.preempted["alloc-"+id] = now
		leader.loop.intro.rec.noteUnpaired(k, "slow", now)
		if i > 0 {
			leader.loop.intro.observe(gpu, profile(i), profile(i-1), 0.5)
			leader.loop.intro.observe(gpu, profile(i-1), profile(i), 0.5)
			leader.loop.intro.markIncompatible(gpu, profile(i), profile(i-1))
		}
		leader.mu.Unlock()
		now = now.Add(reasonsEvery)
		leader.loop.reconcile(t.Context())
		must.NoError(t, follower.watcher.resync(t.Context()))
		must.NoError(t, follower.records.loadState(t.Context(), true))
		switch i {
		case 10:
			after10 = sizes()
		case 59:
			after60 = sizes()
		}

		// the job before is purged
		if i > 0 {
			prev := fmt.Sprintf("churn-%d", i-1)
			delete(f.jobs, prev)
			f.allocs = slices.DeleteFunc(f.allocs, func(a *api.Allocation) bool { return a.JobID == prev })
			f.index++
		}
	}
	t.Logf("after 10 jobs: %v; after 60: %v", after10, after60)
	must.Eq(t, after10, after60)
	for what, n := range after60 {
		must.LessEq(t, 8, n, must.Sprint(what))
	}
}

// shardItems splits by size, in key order: no shard over the budget, the
// count in the first shard when there are several, and an item larger
// than a shard alone left out.
func TestShardItems(t *testing.T) {
	items := func(n, size int) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprintf("k%05d", i)] = strings.Repeat("v", size-6)
		}
		return out
	}
	cases := []struct {
		name    string
		items   map[string]string
		shards  int
		dropped int
	}{
		{"none", nil, 1, 0},
		{"one small", items(1, 100), 1, 0},
		{"just one shard", items(49, 1000), 1, 0},
		{"two shards", items(50, 1000), 2, 0},
		{"many", items(3000, 1000), 62, 0},
		{"too large alone", map[string]string{"big": strings.Repeat("x", shardBudget)}, 1, 1},
		{"past maxShards", items(maxShards*49+100, 1000), maxShards, 100}, // 49 items of 1000 bytes a shard
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			shards, dropped := shardItems(c.items)
			must.SliceLen(t, c.shards, shards)
			must.SliceLen(t, c.dropped, dropped)
			kept := 0
			for i, sh := range shards {
				must.LessEq(t, shardBudget, varSize(sh))
				_, counted := sh[shardsItem]
				must.Eq(t, i == 0 && len(shards) > 1, counted)
				kept += len(sh)
				if counted {
					kept--
				}
			}
			must.Eq(t, len(c.items)-len(dropped), kept)
		})
	}
}

// fakeNotes are a loop's notes without a loop.
type fakeNotes struct {
	pending, placed map[decide.Key]string
	refused         map[decide.Key]bool
	preempted       map[string]time.Time
	keyChanges      int
}

func (n *fakeNotes) reasons() (map[decide.Key]string, map[decide.Key]bool, map[decide.Key]string) {
	return n.pending, n.refused, n.placed
}
func (n *fakeNotes) readReasons(pending, placed map[decide.Key]string, refused map[decide.Key]bool) {
	n.pending, n.placed, n.refused = pending, placed, refused
}
func (n *fakeNotes) preemptedAllocs() map[string]time.Time       { return n.preempted }
func (n *fakeNotes) readPreempted(p map[string]time.Time)        { n.preempted = p }
func (n *fakeNotes) forgetGone(map[string]bool)                  {}
func (n *fakeNotes) keyChanged()                                 { n.keyChanges++ }
func (noIntro) items(map[string]bool) map[string]string          { return map[string]string{} }
func (noIntro) read(map[string]string)                           {}
func (noIntro) chargeItems(map[string]float64) map[string]string { return map[string]string{} }
func (noIntro) readCharges(map[string]string)                    {}
func (alwaysLeads) mayWrite() error                              { return nil }

type (
	noIntro     struct{}
	alwaysLeads struct{}
)

// The records alone: what one replica saves of its loop's notes, another
// reads back into its own, and each new key is said to the loop.
func TestRecordsSaveAndReadBackTheLoopsNotes(t *testing.T) {
	f := &fakeNomad{jobs: map[string]*api.Job{}}
	f.put(gated("a", 25))
	f.put(gated("b", 25))
	now := func() time.Time { return time.Unix(1000, 0) }
	c := &cluster{state: model.New()}
	w := &watcher{cluster: c, log: hclog.NewNullLogger(), nomad: f, metrics: newMetrics(), ns: managedNamespaces(nil), changed: func() {}}
	must.NoError(t, w.resync(t.Context()))
	saved := &fakeNotes{pending: map[decide.Key]string{key("a"): "no room", key("b"): "never fits"},
		refused: map[decide.Key]bool{key("b"): true}, placed: map[decide.Key]string{},
		preempted: map[string]time.Time{"alloc-1": time.Unix(900, 0)}}
	leader := newRecords(c, hclog.NewNullLogger(), f, alwaysLeads{}, saved, noIntro{}, now, time.Minute)
	must.NoError(t, leader.loadSecret(t.Context(), true))
	must.Eq(t, 1, saved.keyChanges)
	must.NoError(t, leader.loadState(t.Context(), false))
	leader.saveState(t.Context())

	read := &fakeNotes{}
	follower := newRecords(c, hclog.NewNullLogger(), f, alwaysLeads{}, read, noIntro{}, now, time.Minute)
	must.NoError(t, follower.loadSecret(t.Context(), false))
	must.Eq(t, 1, read.keyChanges)
	must.NoError(t, follower.loadState(t.Context(), true))
	must.Eq(t, saved.pending, read.pending)
	must.Eq(t, map[decide.Key]bool{key("a"): false, key("b"): true}, read.refused)
	must.Eq(t, saved.preempted, read.preempted)
}
