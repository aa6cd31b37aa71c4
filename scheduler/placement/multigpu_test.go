package placement

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// multiNode is an 8-GPU DGX-1 node with one device group per GPU whose
// plugin composes several in one task (MultiGPU), GPU 0 full and GPU 1
// holding a fraction: GPUs 2-7 are wholly free.
func multiNode(t *testing.T, multi bool) *Snapshot {
	t.Helper()
	tp := topologies.DGX1V100
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: multi})
	ff := policy(t, PolicyFirstFit, Options{})
	place(t, s, ff, Request{ID: "full", Shares: 100})
	place(t, s, ff, Request{ID: "part", Shares: 30})
	return s
}

// On a per-GPU node whose plugin runs the interposer (MultiGPU) every
// policy places an allocation of three whole GPUs; Nomad, given one
// device block per GPU with the fixed index affinities, takes the three
// lowest-indexed wholly free GPUs (2, 3, 4: GPU 0 is full, GPU 1 holds a
// fraction), all the shares of each, and the decision is one Nomad keeps
// (NomadChoosesGPU), its reason saying Nomad chose them. Under map order
// each block takes a wholly free GPU at random, never the same twice.
func TestMultiGPUOnPerGPUNodeTakesLowestFreeGPUs(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			s := multiNode(t, true)
			r := Request{ID: "w", Count: 1, Shares: 300}
			must.Nil(t, Impossible(s, r))
			d := policy(t, name, Options{}).Decide(s, r)
			must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
			must.True(t, s.NomadChoosesGPU(d))
			s.NomadPicksFirstGPU(d)
			p := d.Placements[0]
			must.Eq(t, []int{2, 3, 4}, gpuIdx(p))
			must.Len(t, 300, p.Shares)
			for _, u := range p.GPUs {
				for k := range 100 {
					must.SliceContains(t, p.Shares, u+":"+strconv.Itoa(k))
				}
			}
			must.StrContains(t, p.Reason, "GPUs {2-4} chosen by Nomad")
			must.NotEq(t, "", p.Cell)
			must.True(t, s.NomadChoosesGPU(d))
			must.NoError(t, s.Apply(d))
			must.NoError(t, s.Check())
		})
	}
	t.Run("map order", func(t *testing.T) {
		s := multiNode(t, true)
		rng := rand.New(rand.NewPCG(3, 4))
		seen := map[int]bool{}
		for range 100 {
			d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "w", Count: 1, Shares: 200})
			must.True(t, d.Placed())
			s.NomadPicksGPU(d, rng)
			idx := gpuIdx(d.Placements[0])
			must.SliceLen(t, 2, idx)
			must.NotEq(t, idx[0], idx[1])
			for _, i := range idx {
				must.True(t, i >= 2, must.Sprintf("GPU %d is not wholly free", i))
				seen[i] = true
			}
			must.Len(t, 200, d.Placements[0].Shares)
		}
		must.MapLen(t, 6, seen, must.Sprintf("every wholly free GPU taken some time: %v", seen))
	})
}

// A per-GPU node whose plugin does not compose GPUs keeps one GPU per
// allocation: the multi-GPU request is refused, saying to run the
// interposer there; a fraction on the MultiGPU node is placed and re-chosen
// as before (one GPU, the lowest-indexed with room).
func TestMultiGPURefusedWithoutInterposer(t *testing.T) {
	s := multiNode(t, false)
	r := Request{ID: "w", Count: 1, Shares: 200}
	ref := Impossible(s, r)
	must.NotNil(t, ref)
	must.EqOp(t, RefusedTooLarge, ref.Code)
	must.StrContains(t, ref.Message, "run the plugin's interposer there")
	for _, name := range PolicyNames() {
		d := policy(t, name, Options{}).Decide(s, r)
		must.False(t, d.Placed(), must.Sprint(name))
		must.StrContains(t, d.Refusal.Message, "does not run the interposer", must.Sprint(name))
	}

	multi := multiNode(t, true)
	d := policy(t, PolicyGpushare, Options{}).Decide(multi, Request{ID: "f", Count: 1, Shares: 80})
	must.True(t, d.Placed())
	must.True(t, multi.NomadChoosesGPU(d))
	multi.NomadPicksFirstGPU(d)
	must.Eq(t, []int{2}, gpuIdx(d.Placements[0]), must.Sprint("GPU 1 has 70 shares free: the lowest with room for 80 is GPU 2"))
	must.Len(t, 80, d.Placements[0].Shares)
}

// mixedNode has two models of GPUs, each GPU a device group of its own,
// whose plugin composes them.
func mixedNode(t *testing.T) *Snapshot {
	t.Helper()
	var groups []devicefn.Group
	for _, m := range []string{"A", "B"} {
		g := devicefn.Group{Model: m, SharesPerGPU: 100, Sharing: devicefn.SharingMPS, PerGPU: true, MultiGPU: true}
		for i := range 2 {
			g.GPUs = append(g.GPUs, devicefn.GroupGPU{UUID: "GPU-" + m + "-" + strconv.Itoa(i), Links: []devicefn.Link{{Kind: devicefn.LinkNVLink, NVLinks: 1}, {Kind: devicefn.LinkNVLink, NVLinks: 1}}})
			g.GPUs[i].Links[i] = devicefn.Link{Kind: devicefn.LinkSelf}
		}
		groups = append(groups, g)
	}
	n, err := NodeFromGroups("m", "m", Resources{CPU: 64000, MemoryMiB: 512 * 1024}, nil, groups)
	must.NoError(t, err)
	s := NewSnapshot()
	must.NoError(t, s.AddNode(n))
	return s
}

// A multi-GPU request that may take either model of a node with two
// could be given GPUs of both by Nomad (its device blocks name no
// model): refused there, saying to constrain the model; constrained to
// one model it is placed on that model's GPUs and left to Nomad.
func TestMultiGPURefusedWhereNomadCouldMixModels(t *testing.T) {
	s := mixedNode(t)
	r := Request{ID: "w", Count: 1, Shares: 200}
	ref := Impossible(s, r)
	must.NotNil(t, ref)
	must.StrContains(t, ref.Message, "constrain the device to one model")
	for _, name := range PolicyNames() {
		d := policy(t, name, Options{}).Decide(s, r)
		must.False(t, d.Placed(), must.Sprint(name))
		must.StrContains(t, d.Refusal.Message, "GPUs of several models", must.Sprint(name))
	}
	r.Models = []string{"B"}
	d := policy(t, PolicyGpushare, Options{}).Decide(s, r)
	must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
	must.True(t, s.NomadChoosesGPU(d))
	s.NomadPicksFirstGPU(d)
	gpus := slices.Clone(d.Placements[0].GPUs)
	must.Eq(t, []string{"GPU-B-0", "GPU-B-1"}, gpus)
	// the same decision, asked as any model, is not one Nomad keeps
	d.Placements[0].req.Models = nil
	must.False(t, s.NomadChoosesGPU(d))
}

// Request.NomadPicksFirst: of two DGX-1 nodes whose plugin composes
// per-GPU groups, a (a fraction on GPU 0: Nomad would take 1-4, across
// the NVLink quads, while 4-7 are a free quad) and b (a fraction on GPU
// 4: Nomad takes 0-3, a quad), four whole GPUs go, with the flag, to b on
// the GPUs Nomad takes (re-choosing them changes nothing), and without it
// to a's free quad, the first node's; the policies that rank by cells
// (gpushare, hived) do so, one policy value deciding both ways (the flag
// keys its node index). A fraction is decided alike either way.
func TestNomadPicksFirstRanksNodesByNomadsCell(t *testing.T) {
	tp := topologies.DGX1V100
	for _, name := range []string{PolicyGpushare, PolicyHived} {
		t.Run(name, func(t *testing.T) {
			s := cluster(t, NodeSpec{ID: "a", GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: true},
				NodeSpec{ID: "b", GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: true})
			for node, gpu := range map[string]int{"a": 0, "b": 4} {
				var shares []string
				for k := range 30 {
					shares = append(shares, devicefn.ShareID{UUID: "GPU-" + node + "-" + strconv.Itoa(gpu), Index: k}.String())
				}
				must.NoError(t, s.AddAlloc(Alloc{ID: "frac-" + node, Node: node, Shares: shares}))
			}
			pol := policy(t, name, Options{})
			for range 2 { // the index of each kind of request is reused
				r := Request{ID: "w", Count: 1, Shares: 400, NomadPicksFirst: true}
				d := pol.Decide(s, r)
				must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
				must.Eq(t, "b", d.Placements[0].Node)
				must.Eq(t, []int{0, 1, 2, 3}, gpuIdx(d.Placements[0]))
				must.True(t, s.NomadChoosesGPU(d))
				s.NomadPicksFirstGPU(d)
				must.Eq(t, []int{0, 1, 2, 3}, gpuIdx(d.Placements[0]))

				r.NomadPicksFirst = false
				d = pol.Decide(s, r)
				must.True(t, d.Placed())
				must.Eq(t, "a", d.Placements[0].Node)
				must.Eq(t, []int{4, 5, 6, 7}, gpuIdx(d.Placements[0]))

				f := Request{ID: "f", Count: 1, Shares: 40}
				want := pol.Decide(s, f)
				f.NomadPicksFirst = true
				got := pol.Decide(s, f)
				must.Eq(t, want.Placements[0].GPUs, got.Placements[0].GPUs)
				must.Eq(t, want.Placements[0].Shares, got.Placements[0].Shares)
			}
		})
	}
}

// Under Request.NomadPicksFirst, gpushare breaks a tie of worst link and
// fragmentation between Nomad's picks by the free GPUs the pick cuts off
// from whole free cells (buddy waste, as hived and chooseBuddy do): for
// three whole GPUs, node a (GPU 4 taken: Nomad takes 0-2 of the free quad
// {0-3}, leaving GPU 3 alone) and node b (GPU 0 taken: Nomad takes 1-3,
// the free pair {1,2} and GPU 3, cutting no free cell) both give a
// worst link NV1 and the same fragmentation; b wins, not a, the first.
func TestNomadPicksFirstPrefersThePickThatKeepsCellsWhole(t *testing.T) {
	tp := topologies.DGX1V100
	s := cluster(t, NodeSpec{ID: "a", GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: true},
		NodeSpec{ID: "b", GPUs: 8, Links: links(tp), NUMA: numa(tp), PerGPU: true, MultiGPU: true})
	for node, gpu := range map[string]int{"a": 4, "b": 0} {
		var shares []string
		for k := range 100 {
			shares = append(shares, devicefn.ShareID{UUID: "GPU-" + node + "-" + strconv.Itoa(gpu), Index: k}.String())
		}
		must.NoError(t, s.AddAlloc(Alloc{ID: "one-" + node, Node: node, Shares: shares}))
	}
	d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "w", Count: 1, Shares: 300, NomadPicksFirst: true})
	must.True(t, d.Placed(), must.Sprintf("refused: %s", d.Refusal))
	must.Eq(t, "b", d.Placements[0].Node)
	must.Eq(t, []int{1, 2, 3}, gpuIdx(d.Placements[0]))
}
