package decide

import (
	"strconv"
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

// Under node pins the core ranks nodes for several whole GPUs by the GPUs
// Nomad will take there (placement.Request.NomadPicksFirst): of two DGX-1
// nodes whose plugin composes per-GPU groups, n1 with a fraction on GPU 0
// (Nomad would take 1-4, across the two NVLink quads, while 4-7 are a
// free quad) and n2 with one on GPU 4 (Nomad takes 0-3, a quad), a group
// of four whole GPUs goes to n2, on the quad Nomad takes. Without node
// pins the policy sees a free quad on both and takes n1's 4-7, the first
// node's.
func TestInPlacePinsPreferNodesWhereNomadsPickIsACell(t *testing.T) {
	src, err := fixtures.FS.ReadFile(fixtures.DGX1V100)
	must.NoError(t, err)
	st, err := fixture.Parse(fixtures.DGX1V100, src)
	must.NoError(t, err)
	s := placement.NewSnapshot()
	var nodes []*placement.Node
	for ni, busy := range []int{0, 4} {
		id := "n" + strconv.Itoa(ni+1)
		groups := devicefn.Groups(&st.Inventory, 100, "mps", nil)
		for i := range groups {
			groups[i].PerGPU, groups[i].MultiGPU = true, true
			for j := range groups[i].GPUs {
				groups[i].GPUs[j].UUID += "-" + id
			}
		}
		n, err := placement.NodeFromGroups(id, id, placement.Resources{CPU: 64000, MemoryMiB: 512 << 10}, nil, groups)
		must.NoError(t, err)
		must.NoError(t, s.AddNode(n))
		var shares []string
		for k := range 30 {
			shares = append(shares, devicefn.ShareID{UUID: n.GPUs[busy].UUID, Index: k}.String())
		}
		must.NoError(t, s.AddAlloc(placement.Alloc{ID: "frac-" + id, Node: id, Shares: shares}))
		nodes = append(nodes, n)
	}
	idx := func(d *placement.Decision) []int {
		var out []int
		for _, u := range d.Placements[0].GPUs {
			for _, n := range nodes {
				for i := range n.GPUs {
					if n.GPUs[i].UUID == u {
						out = append(out, i)
					}
				}
			}
		}
		return out
	}
	gs := []Group{group("w", 1, 400, 0, time.Hour)}

	c := cfg()
	c.InPlacePins = true
	as := Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, c)
	must.Eq(t, []string{"pin w"}, kinds(as))
	d := as[0].Decision
	must.True(t, d.InPlace)
	must.Eq(t, "n2", d.Placements[0].Node)
	must.Eq(t, []int{0, 1, 2, 3}, idx(d))
	must.StrContains(t, d.Placements[0].Reason, "worst link NV")

	as = Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, cfg())
	must.Eq(t, []string{"pin w"}, kinds(as))
	d = as[0].Decision
	must.False(t, d.InPlace)
	must.Eq(t, "n1", d.Placements[0].Node)
	must.Eq(t, []int{4, 5, 6, 7}, idx(d))
}
