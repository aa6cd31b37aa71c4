package miglayout

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/shoenig/test/must"
)

// a100 are the profiles an A100-SXM4-40GB publishes (nvidia-smi mig -lgip).
var a100 = []devicefn.MIGProfile{mp("1g.5gb", 1, 4864), mp("1g.5gb+me", 1, 4864), mp("1g.10gb", 1, 9856),
	mp("2g.10gb", 2, 9856), mp("3g.20gb", 3, 19968), mp("4g.20gb", 4, 19968), mp("7g.40gb", 7, 40192)}

// a30 are an A30-24GB's: four compute slices, four memory slices.
var a30 = []devicefn.MIGProfile{mp("1g.6gb", 1, 5836), mp("1g.6gb+me", 1, 5836), mp("2g.12gb", 2, 11748), mp("4g.24gb", 4, 23744)}

func mp(name string, slices int, mib uint64) devicefn.MIGProfile {
	return devicefn.MIGProfile{Name: name, Slices: slices, MemoryMiB: mib}
}

// mixedA100 is the fixture's first GPU: 3g.20gb+2g.10gb+1g.5gb+1g.5gb.
func mixedA100(mode string) GPU {
	return GPU{Index: 0, UUID: "GPU-0", Mode: mode, SharesPerGPU: 100, Instances: []Instance{
		{Profile: "3g.20gb", Slices: 3}, {Profile: "2g.10gb", Slices: 2}, {Profile: "1g.5gb", Slices: 1}, {Profile: "1g.5gb", Slices: 1}}}
}

func one(t *testing.T, m Model, demand []Demand, opts Options) Recommendation {
	t.Helper()
	rs := Recommend([]Node{{ID: "n1", Name: "node1", Models: []Model{m}}}, demand, opts)
	must.SliceLen(t, 1, rs)
	return rs[0]
}

func a100Model(gpus ...GPU) Model {
	return Model{Model: "NVIDIA A100-SXM4-40GB", ParentSlices: 7, Profiles: a100, GPUs: gpus}
}

func shares(s int, w float64) Demand { return Demand{Shares: s, Weight: w} }

// All requests of 14 shares: whole instances of one slice each waste
// nothing but the rounding (7 x 14 = 98 of 100); the current layout holds
// four of them (56 shares used, 44 fragmented).
func TestSmallRequestsGetSevenOneSliceInstances(t *testing.T) {
	r := one(t, a100Model(mixedA100(devicefn.MIGWhole)), []Demand{shares(14, 12)}, DefaultOptions)
	must.True(t, r.Change)
	must.Eq(t, "1g.5gb ×7", Format(r.Recommended))
	must.Eq(t, []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, r.Current)
	must.Eq(t, Amount{Shares: 44, Slices: 3.08}, r.Fragmentation.Current)
	must.Eq(t, Amount{Shares: 2, Slices: 0.14}, r.Fragmentation.Recommended)
	must.Eq(t, Amount{Shares: 42, Slices: 2.94}, r.Saving)
	must.Eq(t, `mig { "NVIDIA A100-SXM4-40GB" = ["1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"] }`, r.Config)
	must.Eq(t, []Size{{Shares: 14, Weight: 12}}, r.Demand)

	// shared instances pack 14-share requests as well as any layout of
	// whole slices does (3 + 2 + 1 + 1 of them): nothing to change
	r = one(t, a100Model(mixedA100(devicefn.MIGShared)), []Demand{shares(14, 12)}, DefaultOptions)
	must.False(t, r.Change)
	must.Eq(t, r.Current, r.Recommended)
	must.Eq(t, Amount{Shares: 2, Slices: 0.14}, r.Fragmentation.Current)
	must.StrContains(t, r.Note, "no layout does better")
	must.Eq(t, "", r.Config)
}

// All requests of 42 shares (3 of 7 slices): two 3g.20gb instances hold
// two of them; the seventh slice cannot have an instance (3g+3g+1g takes 9
// memory slices of 8), so 16 shares stay fragmented.
func TestThreeSliceRequestsGetTwoThreeSliceInstances(t *testing.T) {
	for _, mode := range []string{devicefn.MIGWhole, devicefn.MIGShared} {
		r := one(t, a100Model(mixedA100(mode)), []Demand{shares(42, 5)}, DefaultOptions)
		must.True(t, r.Change, must.Sprint(mode))
		must.Eq(t, []string{"3g.20gb", "3g.20gb"}, r.Recommended, must.Sprint(mode))
		must.Eq(t, Amount{Shares: 58, Slices: 4.06}, r.Fragmentation.Current, must.Sprint(mode))
		must.Eq(t, Amount{Shares: 16, Slices: 1.12}, r.Fragmentation.Recommended, must.Sprint(mode))
	}
	// a whole-instance request of 3g.20gb counts as its profile's size
	r := one(t, a100Model(mixedA100(devicefn.MIGWhole)), []Demand{{Profile: "3g.20gb", Weight: 2}}, DefaultOptions)
	must.Eq(t, []string{"3g.20gb", "3g.20gb"}, r.Recommended)
	must.Eq(t, Amount{Shares: 57.14, Slices: 4}, r.Fragmentation.Current)
	must.Eq(t, Amount{Shares: 14.29, Slices: 1}, r.Fragmentation.Recommended)
	must.Eq(t, []Size{{Profile: "3g.20gb", Weight: 2}}, r.Demand)
}

// Two requests of 14 shares for one of 42: whole instances favour the
// many small ones (7 x 1g: 2 shares lost for 14, all 100 for 42: 34.67
// expected), shared instances hold both (4g = 57 shares: four 14s or one
// 42; 3g = 42: three 14s or one 42).
func TestMixedDemand(t *testing.T) {
	demand := []Demand{shares(14, 20), shares(42, 10)}
	r := one(t, a100Model(mixedA100(devicefn.MIGWhole)), demand, DefaultOptions)
	must.Eq(t, "1g.5gb ×7", Format(r.Recommended))
	must.Eq(t, 48.67, r.Fragmentation.Current.Shares)
	must.Eq(t, 34.67, r.Fragmentation.Recommended.Shares)
	must.Eq(t, 14.0, r.Saving.Shares)

	r = one(t, a100Model(mixedA100(devicefn.MIGShared)), demand, DefaultOptions)
	must.Eq(t, []string{"4g.20gb", "3g.20gb"}, r.Recommended) // ties 7g.40gb at 6.67: more instances
	must.Eq(t, 20.67, r.Fragmentation.Current.Shares)
	must.Eq(t, 6.67, r.Fragmentation.Recommended.Shares)

	// requests of other models, of whole GPUs, or of nothing, do not count
	noise := []Demand{{Shares: 14, Weight: 50, Models: []string{"Tesla V100-SXM2-16GB"}}, shares(100, 50), shares(300, 5), shares(0, 9), shares(42, 0)}
	again := one(t, a100Model(mixedA100(devicefn.MIGShared)), append(demand, noise...), DefaultOptions)
	must.Eq(t, r, again)
	// a request naming the model, or one of its shared instance groups, counts
	named := []Demand{{Shares: 14, Weight: 20, Models: []string{"NVIDIA A100-SXM4-40GB"}},
		{Shares: 42, Weight: 10, Models: []string{devicefn.MIGGroupName("NVIDIA A100-SXM4-40GB", "3g.20gb")}}}
	must.Eq(t, r.Recommended, one(t, a100Model(mixedA100(devicefn.MIGShared)), named, DefaultOptions).Recommended)
}

func TestNoDemandNoRecommendation(t *testing.T) {
	for _, demand := range [][]Demand{nil, {{Shares: 14, Weight: 3, Models: []string{"NVIDIA H100 80GB HBM3"}}}, {{Profile: "1g.6gb", Weight: 4}}} {
		r := one(t, a100Model(mixedA100(devicefn.MIGWhole)), demand, DefaultOptions)
		must.False(t, r.Change)
		must.Nil(t, r.Recommended)
		must.StrContains(t, r.Note, "no fractional demand")
		must.Eq(t, Amount{}, r.Fragmentation.Current)
	}
}

// A change that saves too little of the current fragmentation is not
// worth a drain: the current layout stays.
func TestSmallSavingKeepsTheLayout(t *testing.T) {
	gpu := GPU{Mode: devicefn.MIGWhole, SharesPerGPU: 100, Instances: []Instance{{Profile: "2g.10gb", Slices: 2},
		{Profile: "1g.5gb", Slices: 1}, {Profile: "1g.5gb", Slices: 1}, {Profile: "1g.5gb", Slices: 1}, {Profile: "1g.5gb", Slices: 1}, {Profile: "1g.5gb", Slices: 1}}}
	r := one(t, a100Model(gpu), []Demand{shares(14, 1)}, DefaultOptions) // 16 -> 2
	must.True(t, r.Change)
	must.Eq(t, 14.0, r.Saving.Shares)
	r = one(t, a100Model(gpu), []Demand{shares(14, 1)}, Options{MinRelative: 0.9})
	must.False(t, r.Change)
	must.Eq(t, r.Current, r.Recommended)
	must.StrContains(t, r.Note, "would save only 14.0 shares of 16.0")
	// a layout as good as the best is kept (six 1g.5gb and a 1g.10gb)
	tie := GPU{Mode: devicefn.MIGWhole, SharesPerGPU: 100, Instances: []Instance{{Profile: "1g.10gb", Slices: 1}}}
	for range 6 {
		tie.Instances = append(tie.Instances, Instance{Profile: "1g.5gb", Slices: 1})
	}
	r = one(t, a100Model(tie), []Demand{shares(14, 1)}, DefaultOptions)
	must.False(t, r.Change)
	must.StrContains(t, r.Note, "no layout does better")
	// and one that is the best says so
	tie.Instances[0] = Instance{Profile: "1g.5gb", Slices: 1}
	r = one(t, a100Model(tie), []Demand{shares(14, 1)}, DefaultOptions)
	must.False(t, r.Change)
	must.StrContains(t, r.Note, "the current layout is the best")
}

// Every layout the search enumerates is valid, 3g+3g+1g is not among
// them, and whatever the demand the recommendation is one of them.
func TestInvalidLayoutsNeverRecommended(t *testing.T) {
	p := NewParent(7, a100, nil)
	must.Eq(t, 8, p.MemSlices)
	ls, cut := p.Layouts()
	must.False(t, cut)
	must.SliceLen(t, 77, ls)
	for _, l := range ls {
		must.True(t, p.Valid(l), must.Sprint(l))
		must.False(t, slices.ContainsFunc(l, func(q Profile) bool { return !q.recommendable() }))
	}
	three := Layout{{"3g.20gb", 3, 4}, {"3g.20gb", 3, 4}, {"1g.5gb", 1, 1}}
	must.False(t, p.Valid(three))
	must.False(t, slices.ContainsFunc(ls, func(l Layout) bool { return sameLayout(l, three) }))
	must.False(t, p.Valid(Layout{{"7g.40gb", 7, 8}, {"1g.5gb", 1, 1}}))
	must.False(t, p.Valid(Layout{{"5g.25gb", 5, 5}}))

	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		var demand []Demand
		for range 1 + rng.IntN(4) {
			demand = append(demand, shares(1+rng.IntN(99), float64(1+rng.IntN(10))))
		}
		mode := []string{devicefn.MIGWhole, devicefn.MIGShared}[i%2]
		r := one(t, a100Model(mixedA100(mode)), demand, Options{})
		var l Layout
		for _, n := range r.Recommended {
			q, ok := p.profile(n)
			must.True(t, ok)
			l = append(l, q)
		}
		must.True(t, p.Valid(l), must.Sprint(r.Recommended, demand))
		must.LessEq(t, r.Fragmentation.Current.Shares+0.011, r.Fragmentation.Recommended.Shares) // never worse
	}
}

// An A30 has four slices and four memory slices: requests of a quarter
// get four 1g.6gb; requests of half, two 2g.12gb.
func TestA30(t *testing.T) {
	m := Model{Model: "NVIDIA A30", ParentSlices: 4, Profiles: a30,
		GPUs: []GPU{{Mode: devicefn.MIGWhole, SharesPerGPU: 100, Instances: []Instance{{Profile: "4g.24gb", Slices: 4}}}}}
	r := one(t, m, []Demand{shares(25, 8)}, DefaultOptions)
	must.Eq(t, "1g.6gb ×4", Format(r.Recommended))
	must.Eq(t, Amount{Shares: 75, Slices: 3}, r.Fragmentation.Current)
	must.Eq(t, Amount{}, r.Fragmentation.Recommended)
	r = one(t, m, []Demand{shares(50, 8)}, DefaultOptions)
	must.Eq(t, "2g.12gb ×2", Format(r.Recommended))
	must.Eq(t, 50.0, r.Saving.Shares)
	// shared, one 4g instance holds two halves already
	m.GPUs[0].Mode = devicefn.MIGShared
	r = one(t, m, []Demand{shares(50, 8)}, DefaultOptions)
	must.False(t, r.Change)

	// without published profiles, the A30 table from the names present
	p := NewParent(4, nil, []string{"2g.12gb", "1g.6gb+me"})
	must.True(t, p.Derived)
	must.Eq(t, []Profile{{"4g.24gb", 4, 4}, {"2g.12gb", 2, 2}, {"1g.6gb", 1, 1}, {"1g.6gb+me", 1, 1}}, p.Profiles)
	must.Eq(t, 4, p.MemSlices)
	ls, _ := p.Layouts()
	must.SliceLen(t, 9, ls) // 4g; 2g+2g; 2g; 2g+1g; 2g+1g+1g; 1g x1..4
}

// An older plugin publishes no profiles: the standard 7-slice table, its
// memory read from the names present.
func TestDerivedTable(t *testing.T) {
	p := NewParent(7, nil, []string{"3g.20gb", "2g.10gb", "1g.5gb"})
	must.True(t, p.Derived)
	must.Eq(t, []Profile{{"7g.40gb", 7, 8}, {"4g.20gb", 4, 4}, {"3g.20gb", 3, 4}, {"2g.10gb", 2, 2}, {"1g.5gb", 1, 1}}, p.Profiles)
	p = NewParent(7, nil, []string{"3g.47gb"}) // H100 94GB
	must.Eq(t, []string{"7g.94gb", "4g.47gb", "3g.47gb", "2g.24gb", "1g.12gb"}, Layout(p.Profiles).Names())
	p = NewParent(7, nil, []string{"1g.10gb", "7g.40gb"}) // a 1g of two memory slices is kept
	must.Eq(t, Profile{"1g.10gb", 1, 2}, p.Profiles[len(p.Profiles)-2])

	m := a100Model(mixedA100(devicefn.MIGWhole))
	m.Profiles = nil
	r := one(t, m, []Demand{shares(14, 1)}, DefaultOptions)
	must.Eq(t, "1g.5gb ×7", Format(r.Recommended))
	must.StrContains(t, r.Note, "standard table was assumed")
}

// A node's GPUs of a model add up, each from its own layout.
func TestSeveralGPUs(t *testing.T) {
	seven := GPU{Index: 1, UUID: "GPU-1", Mode: devicefn.MIGWhole, SharesPerGPU: 100, Instances: []Instance{{Profile: "7g.40gb", Slices: 7, Used: 7}}}
	r := one(t, a100Model(mixedA100(devicefn.MIGWhole), seven), []Demand{shares(14, 1)}, DefaultOptions)
	must.Nil(t, r.Current)
	must.Eq(t, []GPULayout{{Index: 0, UUID: "GPU-0", Layout: []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}},
		{Index: 1, UUID: "GPU-1", Layout: []string{"7g.40gb"}, Busy: true}}, r.CurrentByGPU)
	must.Eq(t, 130.0, r.Fragmentation.Current.Shares) // 44 + 86
	must.Eq(t, 4.0, r.Fragmentation.Recommended.Shares)
	must.Eq(t, 126.0, r.Saving.Shares)
	must.Eq(t, 2, r.GPUs)
	must.Eq(t, 1, r.Busy)
	must.Eq(t, "whole", r.Mode)
}

// Instances must also find places side by side (an instance of m memory
// slices starts at a multiple of m): on an A100 every layout the slice sums
// allow can be placed (4g at 0 and 3g at 4; 3g at 4 and 2g at 0 and 2), but
// on a GPU of six compute slices and eight memory slices two 3g instances
// cannot, though their slices add up.
func TestLayoutsMustBePlaceable(t *testing.T) {
	p := NewParent(7, a100, nil)
	for _, l := range []Layout{
		{{"4g.20gb", 4, 4}, {"3g.20gb", 3, 4}},
		{{"3g.20gb", 3, 4}, {"2g.10gb", 2, 2}, {"2g.10gb", 2, 2}},
		{{"2g.10gb", 2, 2}, {"2g.10gb", 2, 2}, {"2g.10gb", 2, 2}, {"1g.5gb", 1, 1}},
		{{"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}},
	} {
		must.True(t, p.Valid(l), must.Sprint(l))
	}
	six := Parent{Slices: 6, MemSlices: 8, Profiles: []Profile{{"3g.20gb", 3, 4}, {"1g.5gb", 1, 1}}}
	must.False(t, six.Valid(Layout{{"3g.20gb", 3, 4}, {"3g.20gb", 3, 4}}))
	must.True(t, six.Valid(Layout{{"3g.20gb", 3, 4}, {"1g.5gb", 1, 1}, {"1g.5gb", 1, 1}}))
	must.False(t, six.Valid(Layout{{"3g.20gb", 3, 4}, {"1g.5gb", 1, 1}, {"1g.5gb", 1, 1}, {"1g.5gb", 1, 1}})) // 1g only at 4 and 5
	ls, _ := six.Layouts()
	for _, l := range ls {
		must.True(t, six.placeable(l), must.Sprint(l))
	}
	// 1g.10gb takes two memory slices: at most four of them
	must.False(t, p.Valid(Layout{{"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}, {"1g.10gb", 1, 2}, {"1g.5gb", 1, 1}}))
}
