package placement

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

var propTopos = []struct {
	topo string
	gpus int
}{{topologies.DGX1V100, 8}, {topologies.HGXH100, 8}, {topologies.PCIe2Socket, 4}, {topologies.DGXA100, 8}, {"", 2}, {"", 0}}

func randomCluster(t testing.TB, rng *rand.Rand) *Snapshot {
	var specs []NodeSpec
	for i := range 2 + rng.IntN(6) {
		tp := propTopos[rng.IntN(len(propTopos))]
		specs = append(specs, NodeSpec{ID: fmt.Sprintf("n%d", i), Rack: fmt.Sprintf("r%d", rng.IntN(2)),
			GPUs: tp.gpus, Links: links(tp.topo), NUMA: numa(tp.topo), Model: []string{"A", "B"}[rng.IntN(2)],
			CPU: int64(8000 + rng.IntN(4)*8000), MemoryMiB: int64(16384 + rng.IntN(4)*16384)})
	}
	return cluster(t, specs...)
}

func randomRequest(rng *rand.Rand, i int) Request {
	r := Request{ID: fmt.Sprintf("r%d", i), Count: 1, Res: Resources{CPU: int64(rng.IntN(5) * 1000), MemoryMiB: int64(rng.IntN(5) * 2048)}}
	switch rng.IntN(6) {
	case 0, 1, 2:
		r.Shares = 5 + rng.IntN(90)
	case 3:
		r.Shares = 100 * (1 << rng.IntN(4))
	case 4:
		r.Shares = 0
	default:
		r.Shares = []int{10, 25, 50, 100}[rng.IntN(4)]
		r.Count = 1 + rng.IntN(3)
	}
	if rng.IntN(4) == 0 {
		r.Models = []string{"A"}
	}
	if rng.IntN(3) == 0 {
		r.Class = ClassOpportunistic
	} else if rng.IntN(4) == 0 {
		r.Class = ClassProduction
	}
	r.VC = []string{"", "t1", "t2"}[rng.IntN(3)]
	if rng.IntN(2) == 0 {
		r.Profile.SM, r.Profile.MemBW = float64(rng.IntN(10))/10, float64(rng.IntN(10))/10
	}
	return r
}

// checkGroupRule asserts the rule of docs/gate-and-pin.md, "Several
// allocations": on any one node, the shares of a group's allocations are
// one allocation's worth or all on one GPU.
func checkGroupRule(t testing.TB, d *Decision) {
	byNode := map[string][]Placement{}
	for _, p := range d.Placements {
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	for node, ps := range byNode {
		if len(ps) == 1 {
			continue
		}
		for _, p := range ps {
			must.Eq(t, 1, len(p.GPUs), must.Sprintf("group %s stacks on node %s across GPUs", d.Request, node))
			must.Eq(t, ps[0].GPUs[0], p.GPUs[0], must.Sprintf("group %s stacks on node %s across GPUs", d.Request, node))
		}
	}
}

func TestPropertyInvariants(t *testing.T) {
	vcs := []VirtualCluster{{Name: "t1", Cells: []CellQuota{{Model: "A", GPUs: 2, Count: 2}}}, {Name: "t2", Cells: []CellQuota{{GPUs: 1, Count: 3}}}}
	for _, name := range PolicyNames() {
		for seed := range uint64(12) {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 99))
				s := randomCluster(t, rng)
				opts := Options{Seed: seed}
				if seed%2 == 0 {
					opts.VCs = vcs
				}
				p := policy(t, name, opts)
				var live []string
				for i := range 150 {
					if len(live) > 0 && rng.IntN(3) == 0 {
						k := rng.IntN(len(live))
						_, err := s.Remove(live[k])
						must.NoError(t, err)
						live = append(live[:k], live[k+1:]...)
						must.NoError(t, s.Check())
						continue
					}
					r := randomRequest(rng, i)
					before := s.Version()
					d := p.Decide(s, r)
					must.Eq(t, before, s.Version(), must.Sprint("Decide changed the snapshot"))
					must.NoError(t, s.Check())
					// The same input gives the same decision.
					again := p.Decide(s, r)
					must.Eq(t, jsonOf(t, d), jsonOf(t, again))
					if !d.Placed() {
						must.NotNil(t, d.Refusal)
						must.NotEq(t, "", d.Refusal.Message)
						continue
					}
					must.Eq(t, r.Count, len(d.Placements))
					checkGroupRule(t, d)
					for _, id := range d.Preempt {
						a, ok := s.Alloc(id)
						must.True(t, ok)
						must.Eq(t, ClassOpportunistic, a.Class, must.Sprint("preempted a guaranteed allocation"))
					}
					must.NoError(t, s.Apply(d), must.Sprint(jsonOf(t, d)))
					must.NoError(t, s.Check())
					for _, id := range d.Preempt {
						for k, l := range live {
							if l == id {
								live = append(live[:k], live[k+1:]...)
								break
							}
						}
					}
					for _, pl := range d.Placements {
						checkCell(t, s, pl)
						live = append(live, pl.AllocID)
						if r.Shares > 0 && r.Shares < 100 && name != PolicyHived && name != PolicyNomadNative {
							must.Eq(t, r.Shares, len(pl.Shares))
							must.Eq(t, 1, len(pl.GPUs))
						}
						must.Eq(t, r.Shares == 0, len(pl.GPUs) == 0)
					}
				}
				must.Eq(t, len(live), len(s.Allocs()))
				for _, id := range live {
					_, err := s.Remove(id)
					must.NoError(t, err)
				}
				must.True(t, s.Empty())
				must.NoError(t, s.Check())
				for _, n := range s.Nodes() {
					must.Eq(t, n.Capacity, n.Free())
				}
			})
		}
	}
}

// TestPropertyDeterministic replays one stream on two snapshots built the
// same way, with two policies of the same seed: every decision is equal.
func TestPropertyDeterministic(t *testing.T) {
	for _, name := range PolicyNames() {
		run := func() []string {
			rng := rand.New(rand.NewPCG(5, 5))
			s := randomCluster(t, rng)
			p := policy(t, name, Options{Seed: 42})
			var out []string
			for i := range 80 {
				d := p.Decide(s, randomRequest(rng, i))
				out = append(out, jsonOf(t, d))
				if d.Placed() {
					must.NoError(t, s.Apply(d))
				}
			}
			return out
		}
		must.Eq(t, run(), run(), must.Sprint(name))
	}
}

func jsonOf(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	must.NoError(t, err)
	return string(b)
}

// checkCell asserts that a placement's GPUs lie in the cell it names, and
// that the node's cells are nested or disjoint (cells never overlap).
func checkCell(t testing.TB, s *Snapshot, pl Placement) {
	if len(pl.GPUs) == 0 {
		return
	}
	n, _ := s.Node(pl.Node)
	cs := n.Cells()
	found := false
	for _, c := range cs {
		if c.Name == pl.Cell {
			must.SliceContainsAll(t, intersect(c.GPUs, pl.GPUs), pl.GPUs, must.Sprintf("cell %s of %s", pl.Cell, pl.AllocID))
			found = true
		}
	}
	must.True(t, found, must.Sprintf("cell %q not on node %s", pl.Cell, pl.Node))
	for i := range cs {
		for j := range cs {
			in := len(intersect(cs[i].GPUs, cs[j].GPUs))
			must.True(t, in == 0 || in == len(cs[i].GPUs) || in == len(cs[j].GPUs), must.Sprintf("cells %s and %s overlap", cs[i].Name, cs[j].Name))
		}
	}
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}

// TestPropertyIndexMatchesFullScan checks incremental scoring: the node the
// per-request-kind index returns is the one a full scan of every node finds.
func TestPropertyIndexMatchesFullScan(t *testing.T) {
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyBestFit, PolicyFirstFit, PolicyGPUPacking, PolicyHived} {
		for seed := range uint64(6) {
			rng := rand.New(rand.NewPCG(seed, 7))
			s := randomCluster(t, rng)
			e := policy(t, name, Options{}).(*engine)
			var live []string
			for i := range 300 {
				if len(live) > 0 && rng.IntN(3) == 0 {
					k := rng.IntN(len(live))
					_, _ = s.Remove(live[k])
					live = append(live[:k], live[k+1:]...)
					continue
				}
				r := randomRequest(rng, i)
				r.Count = 1
				if i%5 == 0 {
					r = Request{ID: r.ID, Count: 1, Shares: 30} // a frequent kind keeps its index warm
				}
				e.sync(s)
				n1, c1, ok1 := e.best(s, &r)
				n2, c2, ok2 := e.scan(s, &r, nil, nil, nil)
				must.Eq(t, ok2, ok1, must.Sprintf("%s seed %d step %d", name, seed, i))
				if ok1 {
					must.Eq(t, n2.ID, n1.ID, must.Sprintf("%s seed %d step %d", name, seed, i))
					must.Eq(t, c2.cost, c1.cost)
				}
				d := e.Decide(s, r)
				if d.Placed() {
					must.NoError(t, s.Apply(d))
					for _, p := range d.Placements {
						live = append(live, p.AllocID)
					}
					for _, id := range d.Preempt {
						for k, l := range live {
							if l == id {
								live = append(live[:k], live[k+1:]...)
								break
							}
						}
					}
				}
			}
		}
	}
}
