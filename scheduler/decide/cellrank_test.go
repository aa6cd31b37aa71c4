package decide

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// Under node pins a group of two whole GPUs on an empty DGX-1 whose
// plugin fingerprints cell ranks takes the GPUs Nomad takes under the
// cell-rank affinities a new pin writes, the double-NVLink pair {0,3};
// a group an older pin gave index affinities (Request.NomadIndexOrder)
// takes {0,1}, as Nomad will for it; on a node whose plugin has no ranks
// both take {0,1}.
func TestInPlacePinsTakeTheGroupsOrder(t *testing.T) {
	tp := topologies.MustGet(topologies.DGX1V100)
	for _, c := range []struct {
		ranked, byIndex bool
		want            []string
	}{
		{true, false, []string{"GPU-n1-0", "GPU-n1-3"}},
		{true, true, []string{"GPU-n1-0", "GPU-n1-1"}},
		{false, false, []string{"GPU-n1-0", "GPU-n1-1"}},
	} {
		n, err := placement.NodeFromSpec(placement.NodeSpec{ID: "n1", CPU: 64000, MemoryMiB: 512 << 10, GPUs: 8,
			Links: tp.Links, NUMA: tp.NUMA, PerGPU: true, MultiGPU: true, CellRanks: c.ranked})
		must.NoError(t, err)
		s := placement.NewSnapshot()
		must.NoError(t, s.AddNode(n))
		g := group("w", 1, 200, 0, 0)
		g.Req.NomadIndexOrder = c.byIndex
		cf := cfg()
		cf.InPlacePins = true
		as := Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Now: now}, cf)
		must.Eq(t, []string{"pin w"}, kinds(as))
		d := as[0].Decision
		must.True(t, d.InPlace)
		must.Eq(t, c.want, d.Placements[0].GPUs, must.Sprintf("ranked %v, by index %v", c.ranked, c.byIndex))
	}
}
