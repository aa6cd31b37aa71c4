package service

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A node-pinned group registered again unchanged keeps its pin byte for
// byte, wherever on its pinned node Nomad put it: a node pin names no
// share, and Nomad takes the shares (in its own order, measured by
// e2e/TestRestarts: not the lowest) and may take another GPU of the node.
// Decided anew, it moved to other nodes and both allocations of a group
// of two were replaced.
func TestANodePinnedGroupRegisteredAgainUnchangedKeepsItsPin(t *testing.T) {
	for _, other := range []bool{false, true} {
		t.Run(fmt.Sprintf("another GPU %v", other), func(t *testing.T) {
			nodes := []*api.Node{perGPUNode(t, "node-1"), perGPUNode(t, "node-2")}
			f, s, rec := placedFirst(t, gated("q", 25), nodes...)
			must.Eq(t, pin.ContractNode, rec.Contract)
			first := pinOf(t, f.jobs["q"])
			gpu := rec.GPUs[0]
			if other {
				for _, u := range gpuUUIDs(t, nodes[0]) {
					if u != gpu {
						gpu = u
						break
					}
				}
			}
			var shares []string // as Nomad took them: not the pin's
			for i := range 25 {
				shares = append(shares, fmt.Sprintf("%s:%d", gpu, 50+2*i))
			}
			f.runningAt("q", "alloc-q", rec.Nodes[0], shares)
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())

			f.put(gated("q", 25))
			must.NoError(t, s.watcher.resync(t.Context()))
			s.loop.reconcile(t.Context())
			must.SliceEmpty(t, pin.Gated(f.jobs["q"]), must.Sprint(s.loop.answers.pending[key("q")]))
			must.Eq(t, first, pinOf(t, f.jobs["q"]), must.Sprint("decided anew: Nomad replaces what runs"))
			must.EqOp(t, 0.0, restartsCounted(t, s))
		})
	}
}
