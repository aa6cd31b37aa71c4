package placement

import (
	"testing"

	"github.com/shoenig/test/must"
)

// TestReplicasSpreadOverNodes: a group's allocations go to different nodes
// while nodes can take them (Nomad's job anti-affinity), under every
// policy, stacking on a node only when no other node has room; a group
// that asks to pack (gpushare.replicas = "pack") does not spread.
func TestReplicasSpreadOverNodes(t *testing.T) {
	specs := []NodeSpec{{ID: "a", Rack: "r1", GPUs: 2}, {ID: "b", Rack: "r1", GPUs: 2}, {ID: "c", Rack: "r1", GPUs: 2}}
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, specs...)
			d := policy(t, name, Options{}).Decide(s, Request{ID: "web", Count: 3, Shares: 20})
			must.True(t, d.Placed(), must.Sprint(d.Refusal))
			must.Eq(t, 3, len(nodesOf(d)), must.Sprintf("three replicas on %v", nodesOf(d)))
		})
	}
	t.Run("more replicas than nodes", func(t *testing.T) {
		// four on three nodes: one node takes two, stacked on one GPU
		s := cluster(t, specs...)
		d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "web4", Count: 4, Shares: 20})
		must.True(t, d.Placed(), must.Sprint(d.Refusal))
		must.Eq(t, 3, len(nodesOf(d)))
		gpus := map[string]bool{}
		for _, p := range d.Placements {
			if nodesOf(d)[p.Node] == 2 {
				gpus[p.GPUs[0]] = true
			}
		}
		must.Eq(t, 1, len(gpus))
	})
	t.Run("pack", func(t *testing.T) {
		s := cluster(t, specs...)
		d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "web", Count: 3, Shares: 20, Pack: true})
		must.True(t, d.Placed(), must.Sprint(d.Refusal))
		must.Eq(t, 1, len(nodesOf(d)), must.Sprintf("a packed group on %v", nodesOf(d)))
	})
}

// TestDistinctPropertyLimitsEachAllocation: Nomad's distinct_property is
// kept for every allocation of a group placed at once, not only against
// allocations already running: two per rack with limit 2, never three.
func TestDistinctPropertyLimitsEachAllocation(t *testing.T) {
	specs := []NodeSpec{{ID: "a", GPUs: 2}, {ID: "b", GPUs: 2}, {ID: "c", GPUs: 2}, {ID: "d", GPUs: 2}}
	rack := map[string]string{"a": "r1", "b": "r1", "c": "r2", "d": "r3"}
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, specs...)
			// one per rack (the default limit), packing asked: without the
			// limit all three would share a node
			r := Request{ID: "g", Count: 3, Shares: 20, Pack: true, Limits: []Limit{{Property: "${meta.rack}", Of: rack, Max: 1}}}
			d := policy(t, name, Options{}).Decide(s, r)
			must.True(t, d.Placed(), must.Sprint(d.Refusal))
			seen := map[string]bool{}
			for _, p := range d.Placements {
				must.False(t, seen[rack[p.Node]], must.Sprintf("two allocations in rack %s: %v", rack[p.Node], nodesOf(d)))
				seen[rack[p.Node]] = true
			}

			// r2 already holds one of the job's allocations (Left): the
			// three need r1, r3 and one more value — there is none
			r.Limits[0].Left = map[string]int{"r2": 0}
			d = policy(t, name, Options{}).Decide(s, r)
			must.False(t, d.Placed())

			// limit 2 per rack, four allocations: r1 takes two, r2 and r3 one each
			r = Request{ID: "h", Count: 4, Shares: 20, Pack: true, Limits: []Limit{{Property: "${meta.rack}", Of: rack, Max: 2}}}
			d = policy(t, name, Options{}).Decide(s, r)
			must.True(t, d.Placed(), must.Sprint(d.Refusal))
			per := map[string]int{}
			for _, p := range d.Placements {
				per[rack[p.Node]]++
			}
			for v, n := range per {
				must.LessEq(t, 2, n, must.Sprintf("rack %s holds %d", v, n))
			}
		})
	}
}

// TestDistinctPropertyTooFewValuesIsRefused: a count the property's
// values can never hold is refused for good, saying why; a node without
// the property takes nothing.
func TestDistinctPropertyTooFewValuesIsRefused(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 2}, NodeSpec{ID: "b", GPUs: 2}, NodeSpec{ID: "c", GPUs: 2})
	r := Request{ID: "g", Count: 3, Shares: 20, Limits: []Limit{{Property: "${meta.rack}", Of: map[string]string{"a": "r1", "b": "r2"}, Max: 1}}}
	ref := Impossible(s, r)
	must.NotNil(t, ref)
	must.Eq(t, RefusedRules, ref.Code)
	must.StrContains(t, ref.Message, "distinct_property ${meta.rack} allows 1 allocation(s) per value")
	must.StrContains(t, ref.Message, "room for 2 of the group's 3")
	r.Count = 2
	must.Nil(t, Impossible(s, r))
	d := policy(t, PolicyGpushare, Options{}).Decide(s, r)
	must.True(t, d.Placed(), must.Sprint(d.Refusal))
	for _, p := range d.Placements {
		must.NotEq(t, "c", p.Node) // c has no rack
	}
}

func nodesOf(d *Decision) map[string]int {
	out := map[string]int{}
	for _, p := range d.Placements {
		out[p.Node]++
	}
	return out
}
