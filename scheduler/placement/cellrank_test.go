package placement

import (
	"strconv"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// dgx1 is a DGX-1 V100 node with one device group per GPU whose plugin
// composes several in one task, fingerprinting cell ranks or not (an
// older plugin).
func dgx1(id string, ranked bool) NodeSpec {
	tp := topologies.DGX1V100
	return NodeSpec{ID: id, GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: true, CellRanks: ranked}
}

// Under the cell-rank affinities of new node pins Nomad takes a DGX-1's
// GPUs in its cell order (0, 3, 1, 2, 4, 7, 5, 6): two whole GPUs of an
// empty node are the double-NVLink pair {0,3}, where index order takes
// {0,1} over one NVLink; a fraction beside a full GPU 0 goes to GPU 3.
// A group that carries the index affinities of an older pin
// (NomadIndexOrder) is taken by index, and so is any group on a node
// whose plugin fingerprints no ranks.
func TestNomadPicksFirstGPUByCellRank(t *testing.T) {
	for _, c := range []struct {
		name           string
		ranked, byIdx  bool
		pair, fraction []int
	}{
		{"cell ranks", true, false, []int{0, 3}, []int{3}},
		{"index affinities of an older pin", true, true, []int{0, 1}, []int{1}},
		{"a node without ranks", false, false, []int{0, 1}, []int{1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := cluster(t, dgx1("a", c.ranked))
			ff := policy(t, PolicyFirstFit, Options{})
			r := Request{ID: "w", Count: 1, Shares: 200, NomadPicksFirst: true, NomadIndexOrder: c.byIdx}
			d := ff.Decide(s, r)
			must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
			must.True(t, s.NomadChoosesGPU(d))
			s.NomadPicksFirstGPU(d)
			must.Eq(t, c.pair, gpuIdx(d.Placements[0]))
			must.Len(t, 200, d.Placements[0].Shares)

			s = cluster(t, dgx1("a", c.ranked))
			place(t, s, ff, Request{ID: "full", Shares: 100})
			f := Request{ID: "f", Count: 1, Shares: 30, NomadIndexOrder: c.byIdx}
			d = ff.Decide(s, f)
			must.True(t, d.Placed())
			s.NomadPicksFirstGPU(d)
			must.Eq(t, c.fraction, gpuIdx(d.Placements[0]))
			must.NoError(t, s.Apply(d))
			must.NoError(t, s.Check())
		})
	}
}

// Deciding Nomad's pick (NomadPicksFirst) under cell ranks puts every
// 2-GPU allocation of a DGX-1 on a double-NVLink pair: four in a row
// fill {0,3}, {1,2}, {4,7}, {5,6}, each decided on the GPUs Nomad then
// takes; by index they would take {0,1}, {2,3}, ... over one NVLink. And
// of two nodes, one whose plugin ranks and one whose plugin does not, the
// decision goes where Nomad's pick is the best cell.
func TestNomadPicksFirstByCellRankPrefersBestCells(t *testing.T) {
	tp := topologies.DGX1V100
	for _, byIdx := range []bool{false, true} {
		s := cluster(t, dgx1("a", true))
		pol := policy(t, PolicyGpushare, Options{})
		var got [][]int
		for i := range 4 {
			d := pol.Decide(s, Request{ID: "w" + strconv.Itoa(i), Count: 1, Shares: 200, NomadPicksFirst: true, NomadIndexOrder: byIdx})
			must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
			decided := gpuIdx(d.Placements[0])
			s.NomadPicksFirstGPU(d)
			must.Eq(t, decided, gpuIdx(d.Placements[0]), must.Sprint("decided what Nomad takes"))
			got = append(got, decided)
			must.NoError(t, s.Apply(d))
		}
		if byIdx {
			must.Eq(t, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, got)
			continue
		}
		must.Eq(t, [][]int{{0, 3}, {1, 2}, {4, 7}, {5, 6}}, got)
		for _, pair := range got {
			must.Eq(t, devicefn.Link{Kind: devicefn.LinkNVLink, NVLinks: 2}, cells.Worst(links(tp), pair))
		}
	}

	s := cluster(t, dgx1("old", false), dgx1("new", true))
	d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "w", Count: 1, Shares: 200, NomadPicksFirst: true})
	must.True(t, d.Placed())
	must.Eq(t, "new", d.Placements[0].Node)
	must.Eq(t, []int{0, 3}, gpuIdx(d.Placements[0]))
}

// NodeFromGroups refuses cell ranks that do not cover the group's GPUs.
func TestNodeRefusesCellRanksOfAnotherLength(t *testing.T) {
	g := devicefn.Group{Model: "M", SharesPerGPU: 100, PerGPU: true, CellRanks: []int{0},
		GPUs: []devicefn.GroupGPU{{UUID: "GPU-a", Links: []devicefn.Link{{Kind: devicefn.LinkSelf}, {Kind: devicefn.LinkPIX}}},
			{UUID: "GPU-b", Links: []devicefn.Link{{Kind: devicefn.LinkPIX}, {Kind: devicefn.LinkSelf}}}}}
	_, err := NodeFromGroups("n", "n", Resources{}, nil, []devicefn.Group{g})
	must.ErrorIs(t, err, ErrBadNode)
	must.ErrorContains(t, err, "1 cell ranks for 2 GPUs")
}
