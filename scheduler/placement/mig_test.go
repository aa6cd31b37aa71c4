package placement

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// The A100 MIG fixture's instances: GPU 0 is 3g + 2g + 1g + 1g, GPU 1 one 7g.
const (
	a100   = "NVIDIA A100-SXM4-40GB"
	gpu0   = "GPU-a2000000-0000-4000-8000-000000000000"
	mig3g  = "MIG-a2000000-0000-4000-8000-000000000001"
	mig2g  = "MIG-a2000000-0000-4000-8000-000000000002"
	mig1a  = "MIG-a2000000-0000-4000-8000-000000000003"
	mig1b  = "MIG-a2000000-0000-4000-8000-000000000004"
	mig7g  = "MIG-a2000000-0000-4000-8000-000000000011"
	grp1g  = a100 + " MIG 1g.5gb"
	grp3g  = a100 + " MIG 3g.20gb"
	grp7g  = a100 + " MIG 7g.40gb"
	wholeM = "H100"
)

// migGroups returns the shared MIG groups of the A100 MIG fixture (at 100
// shares per GPU) but those of the profiles in drop, every UUID with tag
// appended so that several nodes can have them.
func migGroups(t testing.TB, tag string, drop ...string) []devicefn.Group {
	t.Helper()
	st, err := fixture.ParseShipped(fixtures.A100MIG)
	must.NoError(t, err)
	var out []devicefn.Group
	for _, g := range devicefn.SharedMIGGroups(&st.Inventory, 100, devicefn.SharingMPS, nil) {
		if strings.Contains(strings.Join(drop, " "), g.MIG.Profile) {
			continue
		}
		for i := range g.GPUs {
			g.GPUs[i].UUID += tag
			g.GPUs[i].Parent += tag
		}
		out = append(out, g)
	}
	return out
}

// wholeGroup is n whole GPUs of model H100, every pair NV1.
func wholeGroup(id string, n int) devicefn.Group {
	g := devicefn.Group{Model: wholeM, SharesPerGPU: 100, Sharing: devicefn.SharingMPS}
	for i := range n {
		row := make([]devicefn.Link, n)
		for j := range row {
			row[j] = devicefn.Link{Kind: devicefn.LinkNVLink, NVLinks: 1}
		}
		row[i] = devicefn.Link{Kind: devicefn.LinkSelf}
		g.GPUs = append(g.GPUs, devicefn.GroupGPU{UUID: fmt.Sprintf("GPU-%s-%d", id, i), Links: row})
	}
	return g
}

// addMIGNode adds node id with whole H100s (0: none) and the fixture's
// shared MIG instances (UUIDs tagged with "-<id>" unless id is "m").
func addMIGNode(t testing.TB, s *Snapshot, id string, whole int, drop ...string) *Node {
	t.Helper()
	var groups []devicefn.Group
	if whole > 0 {
		groups = append(groups, wholeGroup(id, whole))
	}
	tag := "-" + id
	if id == "m" {
		tag = ""
	}
	groups = append(groups, migGroups(t, tag, drop...)...)
	n, err := NodeFromGroups(id, id, Resources{CPU: 64000, MemoryMiB: 512 * 1024}, nil, groups)
	must.NoError(t, err)
	must.NoError(t, s.AddNode(n))
	return n
}

func gpuByUUID(t testing.TB, s *Snapshot, uuid string) *GPU {
	t.Helper()
	ref, ok := s.byUUID[uuid]
	must.True(t, ok, must.Sprint(uuid))
	return &ref.node.GPUs[ref.gpu]
}

// A shared MIG instance is a GPU of the snapshot that offers its own
// shares (of its parent), never serves whole GPUs, and holds one
// allocation's fraction only.
func TestMIGInstanceIsAGPUOfItsOwnSize(t *testing.T) {
	s := NewSnapshot()
	n := addMIGNode(t, s, "m", 2)
	must.SliceLen(t, 2+5, n.GPUs)
	g3, g7 := gpuByUUID(t, s, mig3g), gpuByUUID(t, s, mig7g)
	must.Eq(t, 100, g3.Shares)
	must.Eq(t, 42, g3.Cap)
	must.Eq(t, 42, g3.Free())
	must.Eq(t, gpu0, g3.Parent())
	must.Eq(t, "3g.20gb", g3.Profile())
	must.Eq(t, grp3g, g3.Model)
	must.False(t, g3.Whole())
	must.True(t, g3.Idle())
	must.Eq(t, 100, g7.Cap)
	must.False(t, g7.Whole()) // every share of its parent, and still no whole GPU
	must.True(t, gpuByUUID(t, s, "GPU-m-0").Whole())
	must.NoError(t, s.Check())
	must.True(t, s.Empty())

	u := s.Usage()
	must.Eq(t, 7, u.GPUs)
	must.Eq(t, 200+42+28+14+14+100, u.Shares)
	must.Eq(t, 2, u.WholeFreeGPUs)
	must.Eq(t, 420, s.capacity[grp3g]) // milli-GPUs of the parent

	// the shares from Cap on are not the instance's
	err := s.AddAlloc(Alloc{ID: "past", Node: "m", Shares: shareRange(mig3g, 40, 43)})
	must.ErrorIs(t, err, ErrUnknown)
	must.StrContains(t, err.Error(), "has only 42 shares")
	must.False(t, s.InUse(mig3g+":50"))
	must.True(t, s.Reservable(shareRange(mig3g, 0, 42)))
	must.False(t, s.Reservable(shareRange(mig3g, 30, 43)))                                   // past its shares
	must.False(t, s.Reservable(append(shareRange(mig1a, 0, 5), shareRange(mig1b, 0, 5)...))) // two instances
	must.False(t, s.Reservable(shareRange(mig7g, 0, 100)))                                   // a whole GPU's shares
	must.True(t, s.Reservable(shareRange(mig7g, 0, 99)))

	must.NoError(t, s.AddAlloc(Alloc{ID: "a", Node: "m", Shares: shareRange(mig3g, 0, 30)}))
	must.Eq(t, 12, g3.Free())
	must.False(t, g3.Idle())
	must.Eq(t, 300, s.VCUsage("")[grp3g])
	must.NoError(t, s.Check())
	u = s.Usage()
	must.Eq(t, 0.3, u.AllocatedGPUs)
	must.Eq(t, []string{"a"}, s.OnGPU(mig3g))

	// no cell holds instances: cells are for whole GPUs
	for _, c := range n.Cells() {
		must.EqOp(t, wholeM, c.Model)
	}
	_, err = NodeFromGroups("bad", "bad", Resources{}, nil, []devicefn.Group{func() devicefn.Group {
		g := migGroups(t, "-bad")[0]
		g.GPUs[0].Parent = ""
		return g
	}()})
	must.ErrorIs(t, err, ErrBadNode)
}

// Under every policy that shares GPUs, a fraction equal to an instance's
// free shares goes to that instance before any other GPU of any node.
func TestMIGExactFitFirst(t *testing.T) {
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyBestFit, PolicyGPUPacking, PolicyFirstFit, PolicyRandom} {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(4) {
				s := NewSnapshot()
				a, err := NodeFromGroups("a", "a", Resources{CPU: 64000, MemoryMiB: 512 * 1024}, nil, []devicefn.Group{wholeGroup("a", 2)})
				must.NoError(t, err)
				must.NoError(t, s.AddNode(a))
				// a whole GPU with exactly 42 shares free on the first node
				must.NoError(t, s.AddAlloc(Alloc{ID: "old", Node: "a", Shares: shareRange("GPU-a-0", 0, 58)}))
				addMIGNode(t, s, "m", 2)
				p := policy(t, name, Options{Seed: seed})
				for i, c := range []struct {
					shares int
					want   []string
				}{{42, []string{mig3g}}, {14, []string{mig1a, mig1b}}, {28, []string{mig2g}}, {14, []string{mig1a, mig1b}}} {
					d := place(t, s, p, Request{ID: fmt.Sprintf("r%d-%d", i, seed), Shares: c.shares})
					must.SliceContains(t, c.want, d.Placements[0].GPUs[0], must.Sprint(d.Placements[0].Reason))
					must.StrContains(t, d.Placements[0].Reason, "an exact fit")
					must.Less(t, 1e6, d.Placements[0].Score) // the policy's own score, shown without the tier
				}
				// the free shares of a used instance are an exact fit too
				must.NoError(t, s.AddAlloc(Alloc{ID: "on7g", Node: "m", Shares: shareRange(mig7g, 0, 80)}))
				d := place(t, s, p, Request{ID: fmt.Sprintf("r20-%d", seed), Shares: 20})
				must.Eq(t, []string{mig7g}, d.Placements[0].GPUs)
			}
		})
	}
	// policies that do not share GPUs take whole GPUs, never an instance
	for _, name := range []string{PolicyHived, PolicyNomadNative} {
		s := NewSnapshot()
		addMIGNode(t, s, "m", 2)
		d := place(t, s, policy(t, name, Options{}), Request{ID: "r", Shares: 42})
		must.StrHasPrefix(t, "GPU-m-", d.Placements[0].GPUs[0])
	}
}

// Interference is predicted among the jobs of one instance only: a
// production job with a tight bound goes onto an instance next to a heavy
// job on its sibling, and is kept off the instance the heavy job shares.
func TestMIGInstancesAreIsolated(t *testing.T) {
	heavy := interference.Profile{SM: 0.9, MemBW: 0.9}
	s := NewSnapshot()
	addMIGNode(t, s, "m", 0)
	p := policy(t, PolicyGpushare, Options{})
	must.NoError(t, s.AddAlloc(Alloc{ID: "hog", Node: "m", Shares: shareRange(mig1a, 0, 10), Profile: heavy}))
	prod := Request{ID: "prod", Shares: 14, Class: ClassProduction, MaxSlowdown: 0.01, Profile: heavy}
	d := place(t, s, p, prod)
	must.Eq(t, []string{mig1b}, d.Placements[0].GPUs) // the hog's sibling, of the same parent
	must.Eq(t, 1.0, d.Placements[0].Predicted)
	must.StrContains(t, d.Placements[0].Reason, "alone on its GPU")

	// within an instance shared further, interference applies as on a GPU
	for _, u := range []string{mig2g, mig3g, mig7g} {
		g := gpuByUUID(t, s, u)
		must.NoError(t, s.AddAlloc(Alloc{ID: "fill-" + u, Node: "m", Shares: shareRange(u, 0, g.Cap/2)}))
		must.NoError(t, s.AddAlloc(Alloc{ID: "fill2-" + u, Node: "m", Shares: shareRange(u, g.Cap/2, g.Cap)}))
	}
	tight := Request{ID: "tight", Count: 1, Shares: 4, Class: ClassProduction, MaxSlowdown: 0.01, Profile: heavy}
	d = p.Decide(s, tight)
	must.False(t, d.Placed())
	must.EqOp(t, RefusedInterference, d.Refusal.Code, must.Sprint(d.Refusal))
	d = place(t, s, p, Request{ID: "normal", Shares: 4, Profile: heavy})
	must.Eq(t, []string{mig1a}, d.Placements[0].GPUs)
	must.Less(t, 1.0, d.Placements[0].Predicted)
}

// Whole-GPU requests and their cells never take instances, not even an
// idle 7g instance that offers every share of its parent; refusals say so.
func TestMIGNeverWholeGPUs(t *testing.T) {
	s := NewSnapshot()
	addMIGNode(t, s, "m", 0)
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyBestFit, PolicyFirstFit, PolicyHived, PolicyRandom} {
		d := policy(t, name, Options{}).Decide(s, Request{ID: "one", Count: 1, Shares: 100})
		must.False(t, d.Placed(), must.Sprint(name))
		must.EqOp(t, RefusedTooLarge, d.Refusal.Code)
		must.StrContains(t, d.Refusal.Message, "shared MIG instances ("+grp1g)
		must.StrContains(t, d.Refusal.Message, "never hold whole GPUs")
	}
	ref := Impossible(s, Request{ID: "one", Count: 1, Shares: 100})
	must.NotNil(t, ref)
	must.EqOp(t, RefusedTooLarge, ref.Code)
	must.StrContains(t, ref.Message, "never hold whole GPUs")
	must.Nil(t, Impossible(s, Request{ID: "frac", Count: 1, Shares: 99})) // the 7g instance

	// a fraction larger than every instance fits none
	small := NewSnapshot()
	addMIGNode(t, small, "m", 0, "7g.40gb")
	ref = Impossible(small, Request{ID: "half", Count: 1, Shares: 50})
	must.NotNil(t, ref)
	must.StrContains(t, ref.Message, "offers 42 shares")
	d := policy(t, PolicyGpushare, Options{}).Decide(small, Request{ID: "half", Count: 1, Shares: 50})
	must.EqOp(t, RefusedTooLarge, d.Refusal.Code)
	must.StrContains(t, d.Refusal.Message, "the largest shared MIG instance")
	must.Nil(t, Impossible(small, Request{ID: "three", Count: 3, Shares: 14})) // a group's fractions stack on one instance: the 3g holds three
	must.NotNil(t, Impossible(small, Request{ID: "four", Count: 4, Shares: 14}))

	// with whole GPUs beside the instances, those are taken
	mixed := NewSnapshot()
	addMIGNode(t, mixed, "m", 2)
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyBestFit, PolicyFirstFit, PolicyHived} {
		d := policy(t, name, Options{}).Decide(mixed, Request{ID: "two", Count: 1, Shares: 200})
		must.True(t, d.Placed(), must.Sprint(name))
		must.Eq(t, []string{"GPU-m-0", "GPU-m-1"}, d.Placements[0].GPUs)
		d = policy(t, name, Options{}).Decide(mixed, Request{ID: "three", Count: 1, Shares: 300})
		must.EqOp(t, RefusedTooLarge, d.Refusal.Code)
		must.StrContains(t, d.Refusal.Message, "the largest node has 2")
	}
	must.Eq(t, "", OnePerNode(mixed, Request{ID: "r", Count: 1, Shares: 100}))

	// keeping a whole GPU's shares on an instance is refused
	r := Request{ID: "k", Count: 1, Shares: 100}
	_, err := mixed.Keep(&r, PolicyGpushare, []Held{{Node: "m", Shares: shareRange(mig7g, 0, 100)}})
	must.Error(t, err)
	_, err = mixed.Prefer(&r, PolicyGpushare, []Held{{Node: "m", Shares: shareRange(mig7g, 0, 100)}})
	must.ErrorContains(t, err, "never holds a whole GPU")
}

// Fragmentation counts an instance's free shares as shares of its
// parent, all of them fragmented for whole-GPU kinds of request, and
// FGD's delta agrees with the measure on nodes with instances.
func TestMIGFragmentation(t *testing.T) {
	s := NewSnapshot()
	addMIGNode(t, s, "m", 0)
	free := 14 + 14 + 28 + 42 + 100
	must.Eq(t, float64(free)/100, Fragmentation(s, Mix{{Shares: 100, Weight: 1}})) // the idle 7g too
	must.Eq(t, 0.0, Fragmentation(s, Mix{{Shares: 14, Weight: 1}}))
	must.Eq(t, 0.98, Fragmentation(s, Mix{{Shares: 50, Weight: 1}})) // all but the 7g

	mix := Mix{{Shares: 14, Weight: 0.3}, {Shares: 42, Weight: 0.3}, {Shares: 100, Weight: 0.2}, {Shares: 200, Weight: 0.2}}
	for _, drop := range [][]string{nil, {"1g.5gb", "2g.10gb", "3g.20gb"}} { // all, and a single-group node
		for _, whole := range []int{0, 2} {
			s := NewSnapshot()
			n := addMIGNode(t, s, "m", whole, drop...)
			f := &fgd{mix: mix}
			for i := range n.GPUs {
				g := &n.GPUs[i]
				for _, take := range []int{g.free, g.free / 2} {
					f.reset(len(s.nodes))
					before := Fragmentation(s, mix)
					delta := f.delta(n, []change{{i, g.free, g.free - take}}, Resources{}) / 100
					must.NoError(t, s.AddAlloc(Alloc{ID: "x", Node: "m", Shares: shareRange(g.UUID, 0, take)}))
					after := Fragmentation(s, mix)
					_, _ = s.Remove("x")
					must.InDelta(t, after-before, delta, 1e-9, must.Sprintf("GPU %s take %d", g.UUID, take))
				}
			}
		}
	}
}
