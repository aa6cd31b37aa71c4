package service

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

// runChild runs dispatched child id as one allocation on shares of node,
// as Nomad places it inside its pool.
func (f *fakeNomad) runChild(id, node string, shares []string) {
	f.runningOn(id, "alloc-"+id, shares)
	f.mu.Lock()
	f.allocs[len(f.allocs)-1].NodeID = node
	f.mu.Unlock()
}

// poolOn are the shares of a pool on one GPU.
func poolOn(rec *pin.Record, gpu string) []string {
	var out []string
	for _, sh := range rec.Shares {
		if model.GPUOf(sh) == gpu {
			out = append(out, sh)
		}
	}
	return out
}

// jobIndexes are the job modify indexes of jobs, by ID.
func jobIndexes(f *fakeNomad, ids []string) map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]uint64{}
	for _, id := range ids {
		out[id] = *f.jobs[id].JobModifyIndex
	}
	return out
}

// A dispatch pool follows the cluster: once no GPU of the pool has room
// for another child, a pool GPU full leads to another GPU of the same
// node, and a node added since the parent was pinned is used, by the
// next child dispatched. Before, the pool was chosen once, when the
// parent was pinned: children used only those nodes and GPUs until the
// parent was registered again, and waited while the rest of the cluster
// was free. Growing the pool is a registration of the parent alone:
// each child is a copy of the parent made when it is dispatched, so the
// children that run, and one that waits inside the old pool, are left as
// they are (no registration, nothing restarted).
func TestDispatchPoolGrowsWithTheCluster(t *testing.T) {
	t.Run("a full pool GPU leads to another GPU of the same node", func(t *testing.T) {
		f, s, rec := placedFirst(t, gatedParam("infer"), dgx1As(t, "node-1", "dc1"))
		must.Len(t, 1, rec.GPUs)
		first := rec.GPUs[0]
		registers := f.registers
		var children []string
		for i := range 4 {
			c := *f.dispatch(t, "infer", fmt.Sprintf("infer/dispatch-1764000000-%08d", i)).ID
			children = append(children, c)
			f.runChild(c, "node-1", rec.Shares[i*25:(i+1)*25])
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			if i < 3 {
				must.Eq(t, registers, f.registers, must.Sprint("the pool has room: left as it is"))
			}
		}
		// the fourth child filled the pool GPU: the pool moves to another
		// GPU of the node for the children dispatched from now on
		must.Eq(t, registers+1, f.registers, must.Sprint("the parent alone is registered"))
		grown, ok := pin.ParseRecord(f.jobs["infer"], "g")
		must.True(t, ok)
		must.Eq(t, []string{"node-1"}, grown.Nodes)
		must.Len(t, 1, grown.GPUs, must.Sprint("one GPU per node: any shares Nomad takes are on one GPU"))
		must.NotEq(t, first, grown.GPUs[0])
		must.Len(t, 100, grown.Shares)
		must.Eq(t, lifecycle.Template, stageOf(s, "infer").State)

		next := f.dispatch(t, "infer", "infer/dispatch-1764000000-00000009")
		child, ok := pin.ParseRecord(next, "g")
		must.True(t, ok)
		must.Eq(t, grown.GPUs, child.GPUs, must.Sprint("the next child is placed on the new pool GPU"))
		before := jobIndexes(f, children)
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		must.Eq(t, before, jobIndexes(f, children), must.Sprint("the running children are not registered"))
		must.Eq(t, registers+1, f.registers, must.Sprint("the new pool has room: left as it is"))
		must.Eq(t, lifecycle.PinnedUnplaced, stageOf(s, *next.ID).State)
	})

	t.Run("a node added later is used by the next child", func(t *testing.T) {
		f, s, rec := placedFirst(t, gatedParam("infer"), dgx1As(t, "node-1", "dc1"))
		first := rec.GPUs[0]
		// every other GPU of node-1 is busy
		var other []string
		for _, u := range gpuUUIDs(t, f.nodes[0]) {
			if u != first {
				for i := range 100 {
					other = append(other, fmt.Sprintf("%s:%d", u, i))
				}
			}
		}
		fill(t, f, "filler", other)
		registers := f.registers
		var children []string
		for i := range 4 {
			c := *f.dispatch(t, "infer", fmt.Sprintf("infer/dispatch-1764000000-%08d", i)).ID
			children = append(children, c)
			f.runChild(c, "node-1", poolOn(rec, first)[i*25:(i+1)*25])
		}
		waiting := *f.dispatch(t, "infer", "infer/dispatch-1764000000-00000004").ID
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		must.Eq(t, registers, f.registers, must.Sprint("the cluster has no room the pool does not name"))
		must.Eq(t, lifecycle.PinnedUnplaced, stageOf(s, waiting).State)

		f.mu.Lock()
		f.nodes = append(f.nodes, dgx1As(t, "node-2", "dc1"))
		f.mu.Unlock()
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		must.Eq(t, registers+1, f.registers, must.Sprint("the parent alone is registered"))
		grown, ok := pin.ParseRecord(f.jobs["infer"], "g")
		must.True(t, ok)
		must.Eq(t, []string{"node-1", "node-2"}, grown.Nodes)
		must.SliceContains(t, grown.GPUs, first, must.Sprint("node-1 keeps its pool GPU, the only one it has"))
		must.Len(t, 2, grown.GPUs)
		must.Len(t, 200, grown.Shares)

		next := f.dispatch(t, "infer", "infer/dispatch-1764000000-00000005")
		child, ok := pin.ParseRecord(next, "g")
		must.True(t, ok)
		must.SliceContains(t, child.Nodes, "node-2", must.Sprint("the next child may be placed on the new node"))
		before := jobIndexes(f, append(slices.Clone(children), waiting))
		must.NoError(t, s.watcher.resync(t.Context()))
		s.loop.reconcile(t.Context())
		must.Eq(t, before, jobIndexes(f, append(slices.Clone(children), waiting)), must.Sprint("children dispatched before are left as they are"))
		old, ok := pin.ParseRecord(f.jobs[waiting], "g")
		must.True(t, ok)
		must.Eq(t, []string{"node-1"}, old.Nodes, must.Sprint("a child keeps the pool it was dispatched with"))
		must.Eq(t, registers+1, f.registers)
	})
}
