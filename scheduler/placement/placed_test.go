package placement

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

// gpuState is what a snapshot holds of each GPU's shares, and of each
// node's GPU allocations.
func gpuState(s *Snapshot) string {
	out := ""
	for _, n := range s.nodes {
		out += fmt.Sprintf("%s used %+v;", n.ID, n.used)
		for _, g := range n.GPUs {
			out += fmt.Sprintf(" %s free %d used %x allocs %d;", g.UUID, g.free, g.used, len(g.allocs))
		}
	}
	return out
}

// A decision applied to the snapshot it was decided on, as it was
// decided, is added without its share IDs parsed again (placedOn), and
// leaves the snapshot as adding its allocation share by share does.
func TestADecisionAppliedAsDecidedIsAnAllocationAdded(t *testing.T) {
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyBestFit, PolicyFirstFit} {
		t.Run(name, func(t *testing.T) {
			nodes := []NodeSpec{{ID: "a", GPUs: 8, Links: links("dgx1-v100")}, {ID: "b", GPUs: 2, Model: "T4"}}
			fast, slow := cluster(t, nodes...), cluster(t, nodes...)
			p := policy(t, name, Options{Seed: 3})
			took := 0
			for i, shares := range []int{25, 50, 10, 100, 75, 25, 100, 40, 60, 5, 0, 200} {
				r := Request{ID: fmt.Sprintf("r%d", i), Count: 1, Shares: shares, Res: Resources{CPU: 100, MemoryMiB: 64}}
				d, ds := p.Decide(fast, r), p.Decide(slow, r)
				must.Eq(t, jsonOf(t, d), jsonOf(t, ds))
				if !d.Placed() {
					continue
				}
				pl := &d.Placements[0]
				if pl.at.applies(fast, d, pl) {
					took++
				}
				must.NoError(t, fast.Apply(d))
				for _, q := range ds.Placements {
					must.NoError(t, slow.AddAlloc(q.alloc()))
				}
				must.NoError(t, fast.Check())
				must.Eq(t, slow.Allocs(), fast.Allocs())
				must.Eq(t, slow.Usage(), fast.Usage())
				must.Eq(t, gpuState(slow), gpuState(fast))
				must.Eq(t, slow.Version(), fast.Version())
			}
			must.Positive(t, took)
			must.Eq(t, took, fast.placed) // the short way was taken each time it could be
			must.Eq(t, 0, slow.placed)
			for _, a := range fast.Allocs() { // and what it added is removed as any allocation is
				_, err := fast.Remove(a.ID)
				must.NoError(t, err)
			}
			must.NoError(t, fast.Check())
			must.Eq(t, gpuState(cluster(t, nodes...)), gpuState(fast))
		})
	}
}

// A decision the snapshot or the caller changed since it was decided is
// applied share by share: its shares are checked again.
func TestADecisionNoLongerAsDecidedIsCheckedShareByShare(t *testing.T) {
	nodes := []NodeSpec{{ID: "a", GPUs: 2}}
	r := Request{ID: "r", Count: 1, Shares: 25, Res: Resources{CPU: 100, MemoryMiB: 64}}

	// another allocation took its shares after it was decided
	s := cluster(t, nodes...)
	p := policy(t, PolicyGpushare, Options{})
	d := p.Decide(s, r)
	pl := &d.Placements[0]
	must.True(t, pl.at.applies(s, d, pl))
	must.NoError(t, s.AddAlloc(Alloc{ID: "other", Node: pl.Node, Shares: pl.Shares}))
	must.False(t, pl.at.applies(s, d, pl))
	must.ErrorIs(t, s.Apply(d), ErrConflict)
	must.NoError(t, s.Check())

	// its share IDs rewritten, the same length on the other GPU: placed
	// where they now say
	s = cluster(t, nodes...)
	d = p.Decide(s, r)
	pl = &d.Placements[0]
	other := "GPU-a-1"
	if pl.GPUs[0] == other {
		other = "GPU-a-0"
	}
	pl.Shares = devicefn.SharesOf(other, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24})
	must.False(t, pl.at.applies(s, d, pl))
	must.NoError(t, s.Apply(d))
	must.NoError(t, s.Check())
	for _, g := range s.nodes[0].GPUs {
		must.Eq(t, g.UUID != other, g.free == g.Shares, must.Sprint(g.UUID))
	}

	// one ID replaced by an equal string written elsewhere, or the node
	// renamed: checked again, and refused where the node is unknown
	s = cluster(t, nodes...)
	d = p.Decide(s, r)
	pl = &d.Placements[0]
	pl.Shares[3] = string([]byte(pl.Shares[3]))
	must.False(t, pl.at.applies(s, d, pl))
	pl.Shares = append([]string(nil), pl.Shares...)
	must.False(t, pl.at.applies(s, d, pl))
	pl.Node = "b"
	must.False(t, pl.at.applies(s, d, pl))
	must.ErrorIs(t, s.Apply(d), ErrUnknown)
	must.Eq(t, 0, len(s.Allocs()))
}
