package service

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A group of two allocations loses the node of one: pinned again as a
// whole, the new pin makes Nomad replace the allocation that survives
// too, in the plan that places its replacement, so its shares are the
// new pin's to take. The survivor's node has room for the group's
// allocation only on those shares: it is pinned there again, instead of
// waiting for ever (e2e/TestLifecycleOperations/lost_node, the group
// "pair"). A group deployed with canaries is pinned beside what survives.
func TestLostNodeRepinTakesTheSurvivorsShares(t *testing.T) {
	for _, canary := range []bool{false, true} {
		t.Run(fmt.Sprintf("canary %v", canary), func(t *testing.T) {
			j := gated("pair", 60)
			j.TaskGroups[0].Count = ptr(2)
			if canary {
				j.TaskGroups[0].Update = &api.UpdateStrategy{Canary: ptr(1)}
			}
			nodes := []*api.Node{dgx1As(t, "node-1", "dc1"), dgx1As(t, "node-2", "dc1"), dgx1As(t, "node-3", "dc1")}
			f, s, rec := placedFirst(t, j, nodes...)
			must.Eq(t, 2, len(rec.Nodes))
			lost, kept := rec.Nodes[0], rec.Nodes[1]
			f.mu.Lock()
			byNode := map[string][]string{}
			for _, sh := range rec.Shares {
				id, err := devicefn.ParseShareID(sh)
				must.NoError(t, err)
				for _, n := range nodes {
					if slices.Contains(gpuUUIDs(t, n), id.UUID) {
						byNode[n.ID] = append(byNode[n.ID], sh)
					}
				}
			}
			for i, n := range []string{lost, kept} {
				f.index++
				f.allocs = append(f.allocs, &api.Allocation{ID: fmt.Sprintf("alloc-%d", i), Namespace: "default", JobID: "pair", TaskGroup: "g", NodeID: n,
					DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
					AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
						Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: byNode[n]}}}}}})
			}
			f.mu.Unlock()
			// every other GPU of the survivor's node is full
			var other []string
			for _, n := range nodes {
				if n.ID != kept {
					continue
				}
				for _, u := range gpuUUIDs(t, n) {
					if !slices.Contains(rec.GPUs, u) {
						for i := range 100 {
							other = append(other, fmt.Sprintf("%s:%d", u, i))
						}
					}
				}
			}
			fill(t, f, "filler", other)
			f.mu.Lock()
			f.allocs[len(f.allocs)-1].NodeID = kept
			// the node of alloc-0 is lost
			f.index++
			f.allocs[0].ClientStatus, f.allocs[0].DesiredStatus, f.allocs[0].ModifyIndex = "lost", "stop", f.index
			for _, n := range f.nodes {
				if n.ID == lost {
					n.Status = "down"
				}
			}
			f.mu.Unlock()
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			must.Eq(t, lifecycle.Migrating, stageOf(s, "pair").State, must.Sprint(stageOf(s, "pair").Why))
			again, ok := pin.ParseRecord(f.jobs["pair"], "g")
			must.True(t, ok)
			if canary {
				// beside the survivor, whose node has no room: it waits
				must.Eq(t, rec.Nodes, again.Nodes, must.Sprint("pinned on the survivor's shares, which a canary runs beside"))
				return
			}
			must.SliceNotContains(t, again.Nodes, lost)
			must.SliceContains(t, again.Nodes, kept, must.Sprintf("not pinned again on the survivor's shares: %s", s.loop.answers.pending[key("pair")]))
		})
	}
}

// gpuUUIDs are the UUIDs of a node's GPUs.
func gpuUUIDs(t *testing.T, n *api.Node) []string {
	t.Helper()
	m, err := model.NodeOf(n)
	must.NoError(t, err)
	var out []string
	for _, g := range m.GPUs {
		out = append(out, g.UUID)
	}
	return out
}
