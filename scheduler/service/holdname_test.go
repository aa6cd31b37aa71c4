package service

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// nodeShares lists the shares of a node's GPUs but those skipped.
func nodeShares(t *testing.T, n *api.Node, skip map[string]bool) []string {
	t.Helper()
	node, err := model.NodeOf(n)
	must.NoError(t, err)
	var out []string
	for _, g := range node.GPUs {
		if skip[g.UUID] {
			continue
		}
		for k := range 100 {
			out = append(out, devicefn.ShareID{UUID: g.UUID, Index: k}.String())
		}
	}
	return out
}

// ungated is a job that asks for shares without the gate, as a user may
// run one.
func ungated(id string, shares uint64) *api.Job {
	j := gated(id, shares)
	j.TaskGroups[0].Constraints = nil
	return j
}

// A job whose ID starts with the hold prefix but that the scheduler did
// not sign is a job like any other: in the model, with its allocation
// holding its shares, listed or seen in events. Here it runs on all 8 GPUs
// of the only node: a gated job waits instead of being pinned onto
// them (Nomad could never place it there), and the job itself is
// adopted as any ungated job. Without the check both were invisible.
func TestAJobNamedLikeAHoldIsModelled(t *testing.T) {
	mine := HoldPrefix + "mine"
	forged := func() *api.Job {
		j := ungated(mine, 800)
		j.Meta = map[string]string{metaHoldFor: "default/gone/g", metaHoldNode: "node-1", metaHoldPin: "x", metaHoldSig: "00"}
		return j
	}
	check := func(t *testing.T, s *Service, f *fakeNomad) {
		t.Helper()
		s.mu.Lock()
		_, job := s.state.Jobs[model.JobKey("default", mine)]
		_, alloc := s.state.Allocs["mine-a"]
		_, held := s.holds[model.JobKey("default", mine)]
		s.mu.Unlock()
		must.True(t, job, must.Sprint("the job is not in the model"))
		must.True(t, alloc, must.Sprint("its allocation is not in the model"))
		must.False(t, held, must.Sprint("taken for a hold"))
		s.loop.reconcile(t.Context())
		_, pinned := pin.ParseRecord(f.jobs["honest"], "g")
		must.False(t, pinned, must.Sprint("pinned onto the shares the job named like a hold runs on"))
	}

	t.Run("listed", func(t *testing.T) {
		f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
		f.put(forged())
		f.runningOn(mine, "mine-a", nodeShares(t, f.nodes[0], nil))
		f.put(gated("honest", 100))
		s := loadedService(t, f)
		check(t, s, f)
	})

	t.Run("events", func(t *testing.T) {
		f := &fakeNomad{nodes: []*api.Node{rawExec(t)}, jobs: map[string]*api.Job{}}
		f.put(gated("honest", 100))
		s := loadedService(t, f)
		j := forged()
		f.put(j)
		f.runningOn(mine, "mine-a", nodeShares(t, f.nodes[0], nil))
		for _, evs := range []*api.Events{jobEvent(t, f.jobs[mine]), allocEvent(t, f.allocs[len(f.allocs)-1])} {
			_, err := s.watcher.apply(t.Context(), evs, s.watcher.ns, 0)
			must.NoError(t, err)
		}
		check(t, s, f)
	})
}

// A hold is the scheduler's only in the namespace it signed it for: a
// signed hold copied into another namespace (its meta, signature and ID
// unchanged) is a job of that namespace like any other, and the GPUs its
// allocation holds are taken. The scheduler's own hold stays out of the
// model.
func TestAHoldCopiedToAnotherNamespaceIsModelled(t *testing.T) {
	f, s, _, _ := staged(t, "two", 100, 2)
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	own := holds[0]
	must.NoError(t, s.watcher.resync(t.Context()))
	s.mu.Lock()
	must.True(t, s.isOwnHold(own), must.Sprint("the scheduler's hold verifies"))
	s.mu.Unlock()

	// the copy runs on every GPU the group "two" does not use
	used := map[string]bool{}
	for _, a := range f.allocs {
		for _, sh := range model.Shares(a) {
			id, err := devicefn.ParseShareID(sh)
			must.NoError(t, err)
			used[id.UUID] = true
		}
	}
	rec, _ := pin.ParseRecord(f.jobs["two"], "g")
	for _, sh := range rec.Shares {
		id, _ := devicefn.ParseShareID(sh)
		used[id.UUID] = true
	}
	copied, err := copyJob(own)
	must.NoError(t, err)
	copied.Namespace = ptr("team-b")
	copied.ModifyIndex = ptr(*own.ModifyIndex + 100)
	a := &api.Allocation{ID: "copy-a", Namespace: "team-b", JobID: *own.ID, TaskGroup: "hold", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: *copied.ModifyIndex + 1, CreateIndex: *copied.ModifyIndex + 1,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"hold": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: nodeShares(t, f.nodes[0], used)}}}}}}
	for _, evs := range []*api.Events{jobEvent(t, copied), allocEvent(t, a)} {
		_, err := s.watcher.apply(t.Context(), evs, s.watcher.ns, 0)
		must.NoError(t, err)
	}
	s.mu.Lock()
	_, job := s.state.Jobs[model.JobKey("team-b", *own.ID)]
	_, alloc := s.state.Allocs["copy-a"]
	_, ownInModel := s.state.Jobs[model.JobKey("default", *own.ID)]
	_, ownHeld := s.holds[model.JobKey("default", *own.ID)]
	s.mu.Unlock()
	must.True(t, job, must.Sprint("the copy is not in the model"))
	must.True(t, alloc, must.Sprint("the copy's allocation is not in the model"))
	must.False(t, ownInModel)
	must.True(t, ownHeld)

	f.put(gated("honest", 100))
	_, err = s.watcher.apply(t.Context(), jobEvent(t, f.jobs["honest"]), s.watcher.ns, 0)
	must.NoError(t, err)
	s.loop.reconcile(t.Context())
	_, pinned := pin.ParseRecord(f.jobs["honest"], "g")
	must.False(t, pinned, must.Sprint("pinned onto the shares the copy holds"))
}

// A hold registered while the cluster is listed, after its jobs were
// listed, reaches the watcher by its event; its allocation may be in the
// listing of allocations. It stays out of the model: the listing does
// not replace what the events judged with its own jobs.
func TestAHoldSeenBetweenTheListingsStaysOut(t *testing.T) {
	f, _, _, _ := staged(t, "two", 100, 2)
	holds := f.liveHolds()
	must.SliceLen(t, 1, holds)
	h := holds[0]
	allocID := "alloc-" + *h.ID
	// the next listing lists the jobs before the hold is there
	f.mu.Lock()
	delete(f.jobs, *h.ID)
	var alloc *api.Allocation
	for i, a := range f.allocs {
		if a.ID == allocID {
			alloc = a
			f.allocs = append(f.allocs[:i], f.allocs[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
	must.NotNil(t, alloc)
	s2 := loadedService(t, f)
	f.beforeList = func(kind string) {
		if kind != "allocs" {
			return
		}
		f.beforeList = nil
		f.mu.Lock()
		f.index++ // registered after the jobs were listed
		h.ModifyIndex, h.JobModifyIndex = ptr(f.index), ptr(f.index)
		f.jobs[*h.ID] = h
		f.index++
		alloc.ModifyIndex, alloc.CreateIndex = f.index, f.index
		f.allocs = append(f.allocs, alloc)
		f.mu.Unlock()
		_, err := s2.watcher.apply(t.Context(), jobEvent(t, h), s2.watcher.ns, 0)
		must.NoError(t, err)
	}
	must.NoError(t, s2.watcher.resync(t.Context()))
	s2.mu.Lock()
	_, inModel := s2.state.Allocs[allocID]
	s2.mu.Unlock()
	must.False(t, inModel, must.Sprint("the hold's allocation is in the model"))
}
