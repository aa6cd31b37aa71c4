package placement

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

// TestAllowedNodes: a request that lists the nodes its job's own rules
// allow is placed on those only, by every policy, single or grouped, with
// or without preemption, and explained on those when it does not fit.
func TestAllowedNodes(t *testing.T) {
	specs := []NodeSpec{{ID: "a", Rack: "r1", GPUs: 4}, {ID: "b", Rack: "r1", GPUs: 4}, {ID: "c", Rack: "r2", GPUs: 2}}
	cases := []struct {
		name    string
		r       Request
		nodes   []string // where it may go; nil: refused
		message string   // a part of the refusal
	}{
		{"fraction on the one allowed node", Request{ID: "f", Count: 1, Shares: 30, Allowed: []string{"c"}}, []string{"c"}, ""},
		{"whole GPUs on the allowed node", Request{ID: "w", Count: 1, Shares: 200, Allowed: []string{"b"}}, []string{"b"}, ""},
		{"a group on the allowed nodes", Request{ID: "g", Count: 2, Shares: 200, Allowed: []string{"a", "c"}}, []string{"a", "c"}, ""},
		{"nil allows every node", Request{ID: "n", Count: 1, Shares: 400}, []string{"a", "b"}, ""},
		{"unknown IDs allow nothing", Request{ID: "u", Count: 1, Shares: 10, Allowed: []string{"zz"}}, nil, "job's own rules"},
		{"empty allows nothing", Request{ID: "e", Count: 1, Shares: 10, Allowed: []string{}}, nil, "none of the cluster's 3 nodes"},
		{"too large for the allowed node", Request{ID: "t", Count: 1, Shares: 400, Allowed: []string{"c"}}, nil, "on the 1 of 3 nodes the job's own rules allow"},
	}
	for _, name := range PolicyNames() {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				s := cluster(t, specs...)
				d := policy(t, name, Options{}).Decide(s, tc.r)
				if tc.nodes == nil {
					must.False(t, d.Placed())
					must.StrContains(t, d.Refusal.String(), tc.message)
					return
				}
				must.True(t, d.Placed(), must.Sprint(d.Refusal))
				for _, p := range d.Placements {
					must.SliceContains(t, tc.nodes, p.Node)
				}
			})
		}
	}
}

// TestAllowedNodesWhenFull: once the allowed nodes are full the request
// waits, though other nodes are free, and preemption looks only there.
func TestAllowedNodesWhenFull(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 1}, NodeSpec{ID: "b", GPUs: 1})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "opp-b", Shares: 100, Class: ClassOpportunistic, Allowed: []string{"b"}})
	place(t, s, p, Request{ID: "opp-a", Shares: 100, Class: ClassOpportunistic, Allowed: []string{"a"}})
	d := p.Decide(s, Request{ID: "x", Count: 1, Shares: 50, Allowed: []string{"a"}})
	must.True(t, d.Placed())
	must.Eq(t, []string{"opp-a[0]"}, d.Preempt) // never the one on b
	d = p.Decide(s, Request{ID: "y", Count: 1, Shares: 50, Class: ClassOpportunistic, Allowed: []string{"a"}})
	must.False(t, d.Placed())
	must.StrContains(t, d.Refusal.Message, "on the 1 of 2 nodes")
}

// TestAllowedManyNodesMatchesTheIndex: a request allowing most nodes goes
// through the node index, one allowing a few is scored on those alone;
// both choose what a full scan of the allowed nodes would.
func TestAllowedManyNodesMatchesTheIndex(t *testing.T) {
	var specs []NodeSpec
	for i := range 40 {
		specs = append(specs, NodeSpec{ID: fmt.Sprintf("n%02d", i), GPUs: 1 + i%4})
	}
	s := cluster(t, specs...)
	p := policy(t, PolicyGpushare, Options{})
	for i := range 30 {
		place(t, s, p, Request{ID: fmt.Sprintf("fill%d", i), Shares: 10 + i})
	}
	var odd, few []string
	for i := range 40 {
		if i%2 == 1 {
			odd = append(odd, fmt.Sprintf("n%02d", i))
		}
	}
	few = odd[:3]
	for _, allowed := range [][]string{odd, few} {
		r := Request{ID: "q", Count: 1, Shares: 35, Allowed: allowed}
		d := p.Decide(s, r)
		must.True(t, d.Placed())
		must.SliceContains(t, allowed, d.Placements[0].Node)
		// a full scan of every node, as groups are placed
		e := p.(*engine)
		e.allowFor(s, &r)
		n, _, ok := e.scan(s, &r, nil, nil, nil)
		must.True(t, ok)
		must.Eq(t, n.ID, d.Placements[0].Node)
	}
}

// TestDistinctNodes: with DistinctNodes a group's fractions never stack on
// one node (Nomad's distinct_hosts); without, they may.
func TestDistinctNodes(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, NodeSpec{ID: "a", GPUs: 2}, NodeSpec{ID: "b", GPUs: 2}, NodeSpec{ID: "c", GPUs: 2})
			p := policy(t, name, Options{})
			for _, r := range []Request{{ID: "frac", Count: 3, Shares: 20, DistinctNodes: true}, {ID: "cpu", Count: 3, Res: Resources{CPU: 100}, DistinctNodes: true}} {
				d := p.Decide(s, r)
				must.True(t, d.Placed(), must.Sprint(d.Refusal))
				seen := map[string]bool{}
				for _, pl := range d.Placements {
					must.False(t, seen[pl.Node], must.Sprintf("%s: two allocations on %s", r.ID, pl.Node))
					seen[pl.Node] = true
				}
			}
			d := p.Decide(s, Request{ID: "four", Count: 4, Shares: 20, DistinctNodes: true})
			must.False(t, d.Placed())
		})
	}
	s := cluster(t, NodeSpec{ID: "a", GPUs: 2}, NodeSpec{ID: "b", GPUs: 2}, NodeSpec{ID: "c", GPUs: 2})
	must.Nil(t, Impossible(s, Request{ID: "r", Count: 4, Shares: 20}))
	ref := Impossible(s, Request{ID: "r", Count: 4, Shares: 20, DistinctNodes: true})
	must.NotNil(t, ref)
	must.EqOp(t, RefusedTooLarge, ref.Code)
	// Impossible honours Allowed: two nodes hold two allocations at most
	ref = Impossible(s, Request{ID: "r", Count: 3, Shares: 200, Allowed: []string{"a", "b"}})
	must.NotNil(t, ref)
	must.StrContains(t, ref.Message, "on the 2 of 3 nodes the job's own rules allow")
	must.Nil(t, Impossible(s, Request{ID: "r", Count: 3, Shares: 200}))
}

// BenchmarkDecideAllowed is BenchmarkDecide's warm gpushare cluster of
// 4,000 nodes with every request allowed on every other node only (a job
// bound to one of two datacenters): decisions per second, to compare with
// BenchmarkDecide's.
func BenchmarkDecideAllowed(b *testing.B) {
	reqs := openbRequests(b)
	const nodes = 4000
	s := benchCluster(b, nodes)
	var half []string
	for i, n := range s.Nodes() {
		if i%2 == 1 {
			half = append(half, n.ID)
		}
	}
	fill := policy(b, PolicyFirstFit, Options{})
	p := policy(b, PolicyGpushare, Options{Mix: MixFromRequests(reqs, 0.95)})
	var fifo []string
	next := 0
	step := func(pol Policy, allowed []string) {
		r := reqs[next%len(reqs)]
		r.ID, r.Allowed = "r"+fmt.Sprint(next), allowed
		next++
		if d := pol.Decide(s, r); d.Placed() {
			if err := s.Apply(d); err != nil {
				b.Fatal(err)
			}
			fifo = append(fifo, d.Placements[0].AllocID)
		}
	}
	for nodes*8*100-totalFree(s) < nodes*8*100*6/10 {
		for range 1000 {
			step(fill, nil)
		}
	}
	for range len(reqs) {
		_, _ = s.Remove(fifo[0])
		fifo = fifo[1:]
		step(p, half)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _ = s.Remove(fifo[0])
		fifo = fifo[1:]
		step(p, half)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// TestKeepAndPreferOnlyWhereAllowed: a group is kept (or preferred) where
// its allocations run only if its job's own rules still allow that node.
func TestKeepAndPreferOnlyWhereAllowed(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 2}, NodeSpec{ID: "b", GPUs: 2})
	n, _ := s.Node("a")
	var shares []string
	for k := range 25 {
		shares = append(shares, devicefn.ShareID{UUID: n.GPUs[1].UUID, Index: k}.String())
	}
	held := []Held{{Node: "a", Shares: shares}}
	for _, tc := range []struct {
		allowed []string
		ok      bool
	}{{nil, true}, {[]string{"a", "b"}, true}, {[]string{"b"}, false}, {[]string{}, false}} {
		r := Request{ID: "q", Count: 1, Shares: 25, Allowed: tc.allowed}
		_, err := s.Keep(&r, "gpushare", held)
		must.Eq(t, tc.ok, err == nil, must.Sprint(tc.allowed, err))
		grown := r
		grown.Shares = 50
		_, err = s.Prefer(&grown, "gpushare", held)
		must.Eq(t, tc.ok, err == nil, must.Sprint(tc.allowed, err))
	}
}
