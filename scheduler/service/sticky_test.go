package service

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// runningOn gives job id's group g a running allocation on node-1 with
// these shares, as Nomad does once it placed the pin.
func (f *fakeNomad) runningOn(id, allocID string, shares []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: allocID, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}}}}}})
}

// pinOf is what a pin wrote into a job's group: its constraints, its
// device's constraints and its placement and signature meta.
func pinOf(t *testing.T, j *api.Job) string {
	t.Helper()
	tg := pin.Group(j, "g")
	must.NotNil(t, tg)
	var dev []*api.Constraint
	for _, task := range tg.Tasks {
		for _, d := range task.Resources.Devices {
			dev = append(dev, d.Constraints...)
		}
	}
	out := ""
	for _, c := range append(append([]*api.Constraint{}, tg.Constraints...), dev...) {
		out += fmt.Sprintf("%s %s %s\n", c.LTarget, c.Operand, c.RTarget)
	}
	return out + tg.Meta[pin.MetaPlacement] + "\n" + tg.Meta[pin.MetaSignature]
}

// A gated jobspec registered again unchanged (plain `nomad job run` of the
// same file, as a user or a CI pipeline does) is pinned exactly as before —
// the same constraints and byte-identical meta and signature — so Nomad
// updates the running allocation in place. Another job landing on the same
// GPU in between, which changes the placement core's reasons and scores,
// changes nothing; neither does registering it three times in a row.
func TestReRegisteredUnchangedIsPinnedAsBefore(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("q", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	first := pinOf(t, f.jobs["q"])
	rec, ok := pin.ParseRecord(f.jobs["q"], "g")
	must.True(t, ok)
	must.NotEq(t, "", f.jobs["q"].TaskGroups[0].Meta[pin.MetaSignature])
	f.runningOn("q", "alloc-q", rec.Shares)

	// a neighbour on the same GPU, and one that leaves exactly 25 shares
	// of another GPU free: the best fit for a new 25-share group
	var same, other []string
	for i := range 25 {
		if sh := fmt.Sprintf("%s:%d", rec.GPUs[0], 50+i); !contains(rec.Shares, sh) {
			same = append(same, sh)
		}
	}
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	for _, g := range node.GPUs {
		if g.UUID != rec.GPUs[0] {
			for i := range 75 {
				other = append(other, fmt.Sprintf("%s:%d", g.UUID, i))
			}
			break
		}
	}
	f.runningOn("neighbour", "alloc-n", same)
	f.runningOn("packed", "alloc-p", other)
	must.NoError(t, s.watcher.resync(t.Context()))

	for round := range 2 {
		for range 1 + 2*round { // once, then three times in a row
			f.put(gated("q", 25))
		}
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		must.SliceEmpty(t, pin.Gated(f.jobs["q"]))
		must.Eq(t, first, pinOf(t, f.jobs["q"]), must.Sprintf("round %d", round))
		_, trusted := s.state.Record(f.jobs["q"], "g")
		must.True(t, trusted)
	}
}

// A group whose request changed is decided again: its old pin is not
// written back, but it stays on the GPU it holds when that still fits,
// the shares it held first, rather than moving where the policy would put
// a new group (here a GPU with exactly 50 shares free, the best fit).
func TestChangedRequestIsDecidedAgainOnItsGPU(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("q", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	first := pinOf(t, f.jobs["q"])
	rec, _ := pin.ParseRecord(f.jobs["q"], "g")
	f.runningOn("q", "alloc-q", rec.Shares)
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	for _, g := range node.GPUs {
		if g.UUID != rec.GPUs[0] {
			var half []string
			for i := range 50 {
				half = append(half, fmt.Sprintf("%s:%d", g.UUID, i))
			}
			f.runningOn("packed", "alloc-p", half)
			break
		}
	}
	f.put(gated("q", 50))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	again, ok := pin.ParseRecord(f.jobs["q"], "g")
	must.True(t, ok)
	must.SliceLen(t, 50, again.Shares)
	must.NotEq(t, first, pinOf(t, f.jobs["q"]))
	must.Eq(t, rec.GPUs, again.GPUs)
	for _, sh := range rec.Shares {
		must.SliceContains(t, again.Shares, sh)
	}
}

// A pinned spec registered again after its job was purged is another
// incarnation of the job: the old placement it carries counts for nothing
// and holds no shares.
func TestPlacementOfAPurgedIncarnationIsNotTrusted(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("q", 25))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	pinned, err := copyJob(f.jobs["q"])
	must.NoError(t, err)
	_, ok := s.state.Record(pinned, "g")
	must.True(t, ok)

	delete(f.jobs, "q") // purged
	pinned.TaskGroups[0].Constraints = append(pinned.TaskGroups[0].Constraints,
		&api.Constraint{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "plan9"})
	f.put(pinned) // registered again: a new create index
	must.NoError(t, s.watcher.resync(t.Context()))
	_, ok = s.state.Record(f.jobs["q"], "g")
	must.False(t, ok)
	mustSayPinDoesNotVerify(t, s, "q")
}

// mustSayPinDoesNotVerify checks that job status says why gpushare no
// longer follows the group of job id, whose pin does not verify.
func mustSayPinDoesNotVerify(t *testing.T, s *Service, id string) {
	t.Helper()
	st, ok := s.view.jobStatus("default", id, "default")
	must.True(t, ok)
	must.Eq(t, "not-gpushare", st.Groups[0].State)
	must.StrContains(t, st.Groups[0].Reason, "carries a gpushare placement that does not verify")
	must.StrContains(t, st.Groups[0].Reason, "put the gate back")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A scheduler that starts while a group waits at the gate again with its
// allocation running (it never saw the pinned version) reads the version
// the allocation runs before deciding the group, and pins it as before.
func TestRestartedSchedulerKeepsAReRegisteredGroup(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("q", 25))
	first := loadedService(t, f)
	first.loop.reconcile(t.Context())
	want := pinOf(t, f.jobs["q"])
	rec, _ := pin.ParseRecord(f.jobs["q"], "g")
	f.runningOn("q", "alloc-q", rec.Shares)
	pinned, err := copyJob(f.jobs["q"])
	must.NoError(t, err)
	f.allocs[len(f.allocs)-1].Job = pinned
	f.put(gated("q", 25)) // re-registered while no scheduler runs

	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	must.StrContains(t, s.loop.answers.pending[model.KeyOf(f.jobs["q"], "g")], "reading the pin")
	s.loop.reconcile(t.Context())
	must.Eq(t, want, pinOf(t, f.jobs["q"]))
}

// Why a pinned group was placed where it is is not in its meta but in the
// scheduler's records: a replica that takes over shows it too.
func TestPlacementReasonSurvivesAFailover(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("pair", 200))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	key := model.KeyOf(f.jobs["pair"], "g")
	must.StrContains(t, s.loop.answers.placed[key], "NV2 pair")
	next := loadedService(t, f)
	st, ok := next.view.jobStatus("default", "pair", "default")
	must.True(t, ok)
	must.Eq(t, "pinned", st.Groups[0].State)
	must.Eq(t, s.loop.answers.placed[key], st.Groups[0].Placement.Reason)
}

// A signed pin counts only for the request it was made for: a pinned
// spec whose request or gpushare meta was edited by hand afterwards (its
// pin and signature copied along) holds nothing.
func TestPinnedSpecEditedAfterItsPinIsNotTrusted(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("q", 1))
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())
	_, ok := s.state.Record(f.jobs["q"], "g")
	must.True(t, ok)
	edited, err := copyJob(f.jobs["q"])
	must.NoError(t, err)
	edited.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptr(uint64(800))
	f.put(edited)
	must.NoError(t, s.watcher.resync(t.Context()))
	_, ok = s.state.Record(f.jobs["q"], "g")
	must.False(t, ok)
	mustSayPinDoesNotVerify(t, s, "q")
}
