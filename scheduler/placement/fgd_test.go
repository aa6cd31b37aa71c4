package placement

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// TestDeltaFastPathMatches checks the uniform-node fast path of the
// fragmentation delta against the general one.
func TestDeltaFastPathMatches(t *testing.T) {
	reqs := openbRequests(t)
	mix := MixFromRequests(reqs, 0.95)
	must.Eq(t, 35, len(mix)) // as the FGD method notes count for the default trace
	rng := rand.New(rand.NewPCG(1, 2))
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, CPU: 96000}, NodeSpec{ID: "b", GPUs: 2, CPU: 16000, Model: "T4"})
	p := policy(t, PolicyFirstFit, Options{})
	f := &fgd{mix: mix}
	for i := range 200 {
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
				cpu := int64(rng.IntN(20000))
				sm := f.summary(n)
				freeCPU := n.Free().CPU - cpu
				fast := f.deltaUniform(n, sm, ch, freeCPU, sm.total-take, take)
				slow := f.deltaGeneral(n, sm, ch, freeCPU, sm.total-take)
				must.True(t, math.Abs(fast-slow) < 1e-9, must.Sprintf("fast %v slow %v", fast, slow))
			}
		}
	}
}
