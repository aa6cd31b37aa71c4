package placement

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// TestDeltaFastPathMatches checks the uniform-node fast path of the
// fragmentation delta against the general one, with and without memory.
func TestDeltaFastPathMatches(t *testing.T) {
	reqs := openbRequests(t)
	mix := MixFromRequests(reqs, 0.95)
	must.Eq(t, 35, len(mix)) // as the FGD method notes count for the default trace
	rng := rand.New(rand.NewPCG(1, 2))
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 96000, MemoryMiB: 393216}, NodeSpec{ID: "b", GPUs: 2, CPU: 16000, MemoryMiB: 122880, Model: "T4"})
	p := policy(t, PolicyFirstFit, Options{})
	fs := []*fgd{{mix: mix}, {mix: mix, memory: true}}
	for i := range 200 {
		f := fs[i%2]
		r := reqs[rng.IntN(len(reqs))]
		r.ID = "r" + itoa(i)
		if d := p.Decide(s, r); d.Placed() && rng.IntN(2) == 0 {
			must.NoError(t, s.Apply(d))
		}
		f.reset(len(s.nodes))
		for _, n := range s.nodes {
			for gi := range n.GPUs {
				g := &n.GPUs[gi]
				take := min(g.free, 1+rng.IntN(100))
				ch := []change{{gi, g.free, g.free - take}}
				free := n.Free()
				free.CPU -= int64(rng.IntN(20000))
				free.MemoryMiB -= int64(rng.IntN(80000))
				sm := f.summary(n)
				fast := f.deltaUniform(n, sm, ch, free, sm.total-take, take)
				slow := f.deltaGeneral(n, sm, ch, free, sm.total-take)
				must.True(t, math.Abs(fast-slow) < 1e-9, must.Sprintf("fast %v slow %v", fast, slow))
			}
		}
	}
}

// TestMemoryStrandsGPUs: FGD ignores memory, so it takes the first of two
// nodes that look alike to it and leaves that node's other 1.5 GPUs with
// too little memory for the typical request; gpushare counts those GPUs
// as fragmented and takes the node with memory to spare.
func TestMemoryStrandsGPUs(t *testing.T) {
	const gib = 1024
	mix := Mix{{Shares: 50, MemoryMiB: 100 * gib, Weight: 1}}
	req := Request{ID: "r", Count: 1, Shares: 50, Res: Resources{MemoryMiB: 100 * gib}}
	for name, want := range map[string]string{PolicyFGD: "small", PolicyGpushare: "large"} {
		s := cluster(t, NodeSpec{ID: "small", GPUs: 2, CPU: 16000, MemoryMiB: 150 * gib},
			NodeSpec{ID: "large", GPUs: 2, CPU: 16000, MemoryMiB: 400 * gib})
		d := policy(t, name, Options{Mix: mix}).Decide(s, req)
		must.True(t, d.Placed())
		must.EqOp(t, want, d.Placements[0].Node, must.Sprint(name))
		n, _ := s.Node("small")
		f := &fgd{mix: mix, memory: name == PolicyGpushare}
		f.reset(len(s.nodes))
		// placing on "small" strands its other 1.5 GPUs only if memory counts
		dfrag := f.delta(n, []change{{0, 100, 50}}, req.Res) / 100
		must.EqOp(t, map[string]float64{PolicyFGD: 0, PolicyGpushare: 1.5}[name], dfrag, must.Sprint(name))
	}
}

func TestMixFromRequestsMemory(t *testing.T) {
	req := func(mem int64) Request {
		return Request{Count: 1, Shares: 50, Res: Resources{CPU: 4000, MemoryMiB: mem}}
	}
	mix := MixFromRequests([]Request{req(10), req(30), req(20), {Count: 1, Shares: 100, Res: Resources{CPU: 1000, MemoryMiB: 7}}}, 1)
	must.Eq(t, Mix{{CPU: 4000, MemoryMiB: 20, Shares: 50, Weight: 0.75}, {CPU: 1000, MemoryMiB: 7, Shares: 100, Weight: 0.25}}, mix)
}

// TestEqualScoresPreferUsedNode: placing a quarter GPU costs no
// fragmentation on either node; fgd takes the first node in order, gpushare
// the node already in use, keeping the idle one whole.
func TestEqualScoresPreferUsedNode(t *testing.T) {
	mix := Mix{{Shares: 25, Weight: 1}}
	for name, want := range map[string]string{PolicyFGD: "idle", PolicyGpushare: "used"} {
		s := cluster(t, NodeSpec{ID: "idle", GPUs: 1, CPU: 8000}, NodeSpec{ID: "used", GPUs: 1, CPU: 8000})
		first := Request{ID: "first", Count: 1, Shares: 25, Avoid: []string{"idle"}}
		must.NoError(t, s.Apply(policy(t, PolicyFirstFit, Options{}).Decide(s, first)))
		d := policy(t, name, Options{Mix: mix}).Decide(s, Request{ID: "r", Count: 1, Shares: 25})
		must.True(t, d.Placed())
		must.EqOp(t, want, d.Placements[0].Node, must.Sprint(name))
	}
}
