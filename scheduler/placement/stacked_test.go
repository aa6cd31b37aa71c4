package placement

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"
)

// TestGroupStackedOnOneGPUWhenAllocationByAllocationFails: a group's
// allocations are placed one by one, each node's pinned to one GPU; when
// the first ones fill the only GPU that fits them on each node, the last
// finds no room, while another GPU holds the whole group stacked. The
// group is placed there rather than waiting for ever (the e2e lost-node
// operation: a group of three pinned again on two nodes).
func TestGroupStackedOnOneGPUWhenAllocationByAllocationFails(t *testing.T) {
	// a: 25 free on GPU 0, GPU 3 idle; b: 25 free on GPU 0 only
	used := map[string][]int{"a": {75, 100, 100, 0}, "b": {75, 100, 100, 100}}
	for _, name := range PolicyNames() {
		if name == PolicyHived || name == PolicyNomadNative {
			continue // they give each fraction a whole GPU
		}
		t.Run(name, func(t *testing.T) {
			s := cluster(t, NodeSpec{ID: "a", GPUs: 4}, NodeSpec{ID: "b", GPUs: 4})
			for node, us := range used {
				for g, u := range us {
					if u > 0 {
						must.NoError(t, s.AddAlloc(Alloc{ID: fmt.Sprintf("%s-%d", node, g), Node: node, Shares: shareRange(fmt.Sprintf("GPU-%s-%d", node, g), 0, u)}))
					}
				}
			}
			d := policy(t, name, Options{}).Decide(s, Request{ID: "g", Count: 3, Shares: 25})
			must.True(t, d.Placed(), must.Sprint(d.Refusal))
			must.Eq(t, 3, len(d.Placements))
			gpus := map[string]map[string]bool{} // by node
			for _, p := range d.Placements {
				if gpus[p.Node] == nil {
					gpus[p.Node] = map[string]bool{}
				}
				gpus[p.Node][p.GPUs[0]] = true
				if name != PolicyRandom { // random may place one on b's GPU 0
					must.Eq(t, []string{"GPU-a-3"}, p.GPUs)
				}
			}
			for node, g := range gpus {
				must.MapLen(t, 1, g, must.Sprintf("allocations of the group on two GPUs of node %s", node))
			}
			must.NoError(t, s.Apply(d))
			must.NoError(t, s.Check())
		})
	}
}
