package decide

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// Under node pins, a group of one allocation of four whole GPUs on a
// DGX-1 whose plugin offers each GPU as a device group and composes them
// (devicefn.Group.MultiGPU) takes the GPUs Nomad will take, the four
// lowest-indexed wholly free (1-4: GPU 0 holds a fraction), not the NUMA
// quad the policy prefers, and is pinned by node (InPlace); without node
// pins it keeps the policy's quad.
func TestInPlacePinsTakeNomadsGPUsForMultiGPU(t *testing.T) {
	src, err := fixtures.FS.ReadFile(fixtures.DGX1V100)
	must.NoError(t, err)
	st, err := fixture.Parse(fixtures.DGX1V100, src)
	must.NoError(t, err)
	groups := devicefn.Groups(&st.Inventory, 100, "mps", nil)
	for i := range groups {
		groups[i].PerGPU, groups[i].MultiGPU = true, true
	}
	n, err := placement.NodeFromGroups("n1", "n1", placement.Resources{CPU: 64000, MemoryMiB: 512 << 10}, nil, groups)
	must.NoError(t, err)
	s := placement.NewSnapshot()
	must.NoError(t, s.AddNode(n))
	var shares []string
	for k := range 30 {
		shares = append(shares, devicefn.ShareID{UUID: n.GPUs[0].UUID, Index: k}.String())
	}
	must.NoError(t, s.AddAlloc(placement.Alloc{ID: "frac", Node: "n1", Shares: shares}))
	gs := []Group{group("w", 1, 400, 0, time.Hour)}
	idx := func(d *placement.Decision) []int {
		var out []int
		for _, u := range d.Placements[0].GPUs {
			for i := range n.GPUs {
				if n.GPUs[i].UUID == u {
					out = append(out, i)
				}
			}
		}
		return out
	}

	c := cfg()
	c.InPlacePins = true
	as := Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, c)
	must.Eq(t, []string{"pin w"}, kinds(as))
	must.True(t, as[0].Decision.InPlace)
	must.True(t, as[0].Decision.PerGPU)
	must.Eq(t, []int{1, 2, 3, 4}, idx(as[0].Decision))
	must.Len(t, 400, as[0].Decision.Placements[0].Shares)
	must.StrContains(t, as[0].Decision.Placements[0].Reason, "chosen by Nomad")

	as = Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, cfg())
	must.False(t, as[0].Decision.InPlace)
	// a share pin, still one block per GPU (each names the policy's shares)
	must.True(t, as[0].Decision.PerGPU)
	must.NotEq(t, []int{1, 2, 3, 4}, idx(as[0].Decision))
}
