package placement

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// TestPoolGivesEachNodeTheGPUsOfOneAllocation: the pool a parameterized
// parent is pinned to names, on each allowed node, every share of exactly
// the GPUs one child asks for, so that whatever shares Nomad takes from it
// for a child are ones Reserve accepts: one GPU (the one with most room)
// for a fraction or a whole GPU, k GPUs for k whole GPUs. Busy nodes stay
// in the pool (children wait there), nodes that can never hold a child,
// avoided and disallowed nodes do not; it holds nothing.
func TestPoolGivesEachNodeTheGPUsOfOneAllocation(t *testing.T) {
	specs := []NodeSpec{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}, {ID: "c", GPUs: 1}, {ID: "d", GPUs: 4}}
	s := cluster(t, specs...)
	// node a: GPU 0 three-quarters used, GPU 1 a quarter: GPU 2 is emptiest (ties: lowest index)
	place(t, s, policy(t, PolicyFirstFit, Options{}), Request{ID: "x", Shares: 75, Allowed: []string{"a"}})
	before := s.Usage()

	t.Run("fraction", func(t *testing.T) {
		d := s.Pool(&Request{ID: "p", Count: 1, Shares: 25, Allowed: []string{"a", "b", "c"}}, "gpushare")
		must.Nil(t, d.Refusal)
		must.Eq(t, []string{"a", "b", "c"}, nodes(d))
		for _, p := range d.Placements {
			must.Len(t, 1, p.GPUs)
			must.Len(t, 100, p.Shares, must.Sprint("all of one GPU's shares: any 25 Nomad takes are on one GPU"))
			for _, sh := range p.Shares {
				must.StrHasPrefix(t, p.GPUs[0]+":", sh)
			}
		}
		must.NotEq(t, 0, gpuIdx(d.Placements[0])[0], must.Sprint("node a: not its busiest GPU"))
		must.Eq(t, before, s.Usage(), must.Sprint("a pool holds nothing"))
	})
	t.Run("whole GPUs", func(t *testing.T) {
		d := s.Pool(&Request{ID: "p", Count: 1, Shares: 200, Avoid: []string{"d"}}, "gpushare")
		must.Nil(t, d.Refusal)
		must.Eq(t, []string{"a", "b"}, nodes(d), must.Sprint("c has one GPU; d is avoided"))
		for _, p := range d.Placements {
			must.Len(t, 2, p.GPUs)
			must.Len(t, 200, p.Shares, must.Sprint("exactly two GPUs: Nomad must take all of them"))
		}
		must.SliceNotContains(t, gpuIdx(d.Placements[0]), 0)
	})
	t.Run("a busy GPU stays in the pool", func(t *testing.T) {
		d := s.Pool(&Request{ID: "p", Count: 1, Shares: 100, Allowed: []string{"c"}}, "gpushare")
		must.Nil(t, d.Refusal)
		s2 := cluster(t, NodeSpec{ID: "c", GPUs: 1})
		place(t, s2, policy(t, PolicyFirstFit, Options{}), Request{ID: "full", Shares: 100})
		d2 := s2.Pool(&Request{ID: "p", Count: 1, Shares: 100}, "gpushare")
		must.Nil(t, d2.Refusal, must.Sprint("children wait in Nomad for the GPU"))
		must.Eq(t, d.Placements[0].Shares, d2.Placements[0].Shares)
	})
	t.Run("nothing can hold it", func(t *testing.T) {
		d := s.Pool(&Request{ID: "p", Count: 1, Shares: 800}, "gpushare")
		must.NotNil(t, d.Refusal)
		must.True(t, strings.Contains(d.Refusal.Message, "800 shares"))
		d = s.Pool(&Request{ID: "p", Count: 1, Shares: 25, Models: []string{"no such GPU"}}, "gpushare")
		must.NotNil(t, d.Refusal)
	})
}

func nodes(d *Decision) []string {
	var out []string
	for _, p := range d.Placements {
		out = append(out, p.Node)
	}
	return out
}
