package placement

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

func TestFractionFillsTheGPUThatLeastIncreasesFragmentation(t *testing.T) {
	s := cluster(t,
		NodeSpec{ID: "a", GPUs: 2},
		NodeSpec{ID: "b", GPUs: 2})
	p := policy(t, PolicyGpushare, Options{Mix: Mix{{Shares: 50, Weight: 0.5}, {Shares: 100, Weight: 0.5}}})
	first := place(t, s, p, Request{ID: "half-1", Shares: 50})
	// The second half goes next to the first: a whole GPU stays free for
	// whole-GPU jobs instead of two half-free GPUs.
	second := place(t, s, p, Request{ID: "half-2", Shares: 50})
	must.Eq(t, first.Placements[0].GPUs, second.Placements[0].GPUs)
	must.StrContains(t, second.Placements[0].Reason, "fragmentation")
	// A fraction never spans GPUs and uses exact share IDs.
	must.Eq(t, 50, len(second.Placements[0].Shares))
	must.StrHasSuffix(t, ":50", second.Placements[0].Shares[0])
}

func TestFractionAgainstTheMix(t *testing.T) {
	// Node a has a GPU with 30 free shares, node b one with 60 free. The mix
	// is all 60-share jobs: a 30-share job must fill node a's 30 (which 60s
	// cannot use) rather than spoil node b's 60.
	s := cluster(t, NodeSpec{ID: "a", GPUs: 1}, NodeSpec{ID: "b", GPUs: 1})
	fill := policy(t, PolicyFirstFit, Options{})
	d := fill.Decide(s, Request{ID: "x", Count: 1, Shares: 70})
	must.Eq(t, "a", d.Placements[0].Node)
	must.NoError(t, s.Apply(d))
	d = fill.Decide(s, Request{ID: "y", Count: 1, Shares: 40, Avoid: []string{"a"}})
	must.Eq(t, "b", d.Placements[0].Node)
	must.NoError(t, s.Apply(d))
	for _, name := range []string{PolicyGpushare, PolicyFGD} {
		p := policy(t, name, Options{Mix: Mix{{Shares: 60, Weight: 1}}})
		got := p.Decide(s, Request{ID: "small", Count: 1, Shares: 30})
		must.Eq(t, "a", got.Placements[0].Node, must.Sprint(name))
	}
}

func TestCPUAndMemoryCountAsInNomad(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "small", GPUs: 8, CPU: 1000, MemoryMiB: 1024}, NodeSpec{ID: "big", GPUs: 1, CPU: 8000, MemoryMiB: 8192})
	for _, name := range PolicyNames() {
		p := policy(t, name, Options{})
		d := p.Decide(s, Request{ID: "j", Count: 1, Shares: 50, Res: Resources{CPU: 2000, MemoryMiB: 2048}})
		must.True(t, d.Placed(), must.Sprint(name))
		must.Eq(t, "big", d.Placements[0].Node, must.Sprint(name))
	}
	p := policy(t, PolicyGpushare, Options{})
	d := p.Decide(s, Request{ID: "huge", Count: 1, Shares: 50, Res: Resources{CPU: 9000}})
	must.False(t, d.Placed())
	must.Eq(t, RefusedNoCapacity, d.Refusal.Code)
	must.StrContains(t, d.Refusal.Message, "cpu 9000")
}

func TestGPUModelConstraint(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "t4", GPUs: 2, Model: "T4"}, NodeSpec{ID: "v100", GPUs: 2, Model: "V100"})
	for _, name := range PolicyNames() {
		p := policy(t, name, Options{})
		d := p.Decide(s, Request{ID: "j", Count: 1, Shares: 100, Models: []string{"V100"}})
		must.Eq(t, "v100", d.Placements[0].Node, must.Sprint(name))
	}
	p := policy(t, PolicyGpushare, Options{})
	d := p.Decide(s, Request{ID: "a100", Count: 1, Shares: 100, Models: []string{"A100"}})
	must.Eq(t, RefusedNoModel, d.Refusal.Code)
	must.StrContains(t, d.Refusal.Message, "T4, V100")
}

func TestRefusalsSayWhatToDo(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "x", GPUs: 8, Links: links(topologies.DGX1V100), NUMA: numa(topologies.DGX1V100)})
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "a", Shares: 200})
	place(t, s, p, Request{ID: "b", Shares: 200})
	place(t, s, p, Request{ID: "c", Shares: 100})
	cases := []struct {
		req  Request
		code string
		text string
	}{
		{Request{ID: "four", Count: 1, Shares: 400}, RefusedTopology, "the largest free cell is 2 GPUs (NV2 pair"},
		{Request{ID: "sixteen", Count: 1, Shares: 1600}, RefusedTooLarge, "the largest node has 8"},
		{Request{ID: "odd", Count: 1, Shares: 150}, RefusedInvalid, "neither a fraction"},
		{Request{ID: "zero", Count: 0, Shares: 10}, RefusedInvalid, "count 0"},
	}
	for _, tc := range cases {
		t.Run(tc.req.ID, func(t *testing.T) {
			d := p.Decide(s, tc.req)
			must.False(t, d.Placed())
			must.Eq(t, tc.code, d.Refusal.Code)
			must.StrContains(t, d.Refusal.Message, tc.text)
		})
	}
}

// gavel returns the calibrated model and two of its named profiles.
func gavel(t *testing.T, names ...string) (*interference.Model, []interference.Profile) {
	m := interference.Default()
	var out []interference.Profile
	for _, n := range names {
		p, ok := m.Lookup(n)
		must.True(t, ok, must.Sprint(n))
		out = append(out, p)
	}
	return m, out
}

func TestInterferencePrefersTheBestPairing(t *testing.T) {
	m, pr := gavel(t, "ResNet-50 (batch size 16)", "Transformer (batch size 32)", "Recommendation (batch size 512)")
	heavySM, heavyBW, newJob := pr[0], pr[1], pr[2]
	s := cluster(t, NodeSpec{ID: "n", GPUs: 2})
	p := policy(t, PolicyGpushare, Options{Model: m})
	must.NoError(t, s.AddAlloc(Alloc{ID: "sm-hog", Node: "n", Shares: shareRange("GPU-n-0", 0, 50), Profile: heavySM}))
	must.NoError(t, s.AddAlloc(Alloc{ID: "bw-hog", Node: "n", Shares: shareRange("GPU-n-1", 0, 50), Profile: heavyBW}))
	// The new job is SM-bound: it pairs better with the bandwidth-bound job.
	d := p.Decide(s, Request{ID: "rec", Count: 1, Shares: 50, Profile: newJob})
	must.True(t, d.Placed())
	must.Eq(t, []string{"GPU-n-1"}, d.Placements[0].GPUs)
	must.StrContains(t, d.Placements[0].Reason, "bw-hog")
	must.StrContains(t, d.Placements[0].Reason, "predicted")
	must.Less(t, 1.0, d.Placements[0].Predicted)
}

// A GPU with room refused by a bound, beside nodes with none: the
// refusal says both, not only that the most free on any GPU is what the
// job asks for.
func TestRefusalNamesTheBoundBesideFullNodes(t *testing.T) {
	m, pr := gavel(t, "ResNet-50 (batch size 16)")
	hog := pr[0]
	s := cluster(t, NodeSpec{ID: "n", GPUs: 1}, NodeSpec{ID: "full", GPUs: 1})
	must.NoError(t, s.AddAlloc(Alloc{ID: "hog", Node: "n", Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	must.NoError(t, s.AddAlloc(Alloc{ID: "whole", Node: "full", Shares: shareRange("GPU-full-0", 0, 100), Profile: hog}))
	d := policy(t, PolicyGpushare, Options{Model: m}).Decide(s, Request{ID: "prod", Count: 1, Shares: 50, Class: ClassProduction, Profile: hog})
	must.False(t, d.Placed())
	must.StrContains(t, d.Refusal.Message, "the most free on any GPU is 50")
	must.StrContains(t, d.Refusal.Message, "on 1 node(s) a GPU has room, but sharing it would slow a production job by more than its bound (10% for this job)")
}

func TestProductionSlowdownBound(t *testing.T) {
	m, pr := gavel(t, "ResNet-50 (batch size 16)")
	hog := pr[0]
	s := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	must.NoError(t, s.AddAlloc(Alloc{ID: "hog", Node: "n", Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	p := policy(t, PolicyGpushare, Options{Model: m})
	prod := Request{ID: "prod", Count: 1, Shares: 50, Class: ClassProduction, Profile: hog}
	d := p.Decide(s, prod)
	must.False(t, d.Placed())
	must.Eq(t, RefusedInterference, d.Refusal.Code)
	must.StrContains(t, d.Refusal.Message, "10%")
	// A looser bound admits it, and the reason carries the prediction.
	prod.MaxSlowdown = 0.6
	d = p.Decide(s, prod)
	must.True(t, d.Placed())
	must.StrContains(t, d.Placements[0].Reason, "predicted 0.")
	// So does a looser default bound of the policy.
	loose := policy(t, PolicyGpushare, Options{Model: m, MaxSlowdown: 0.6})
	prod.MaxSlowdown = 0
	must.True(t, loose.Decide(s, prod).Placed())
	// A production job already running is protected too.
	s2 := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	must.NoError(t, s2.AddAlloc(Alloc{ID: "prod", Node: "n", Class: ClassProduction, Shares: shareRange("GPU-n-0", 0, 50), Profile: hog}))
	d = p.Decide(s2, Request{ID: "batch", Count: 1, Shares: 50, Profile: hog})
	must.False(t, d.Placed())
	// Unprofiled jobs are predicted not to interfere.
	d = p.Decide(s2, Request{ID: "unknown", Count: 1, Shares: 50})
	must.True(t, d.Placed())
}

func shareRange(uuid string, from, to int) []string {
	var out []string
	for k := from; k < to; k++ {
		out = append(out, uuid+":"+itoa(k))
	}
	return out
}

func itoa(k int) string {
	if k == 0 {
		return "0"
	}
	var b []byte
	for ; k > 0; k /= 10 {
		b = append([]byte{byte('0' + k%10)}, b...)
	}
	return string(b)
}

func TestVirtualClusterGuarantee(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 4, Links: links(topologies.PCIe2Socket), NUMA: numa(topologies.PCIe2Socket)}, NodeSpec{ID: "b", GPUs: 4, Links: links(topologies.PCIe2Socket), NUMA: numa(topologies.PCIe2Socket)})
	opts := Options{VCs: []VirtualCluster{{Name: "team-a", Cells: []CellQuota{{GPUs: 4, Count: 1}}}}}
	p := policy(t, PolicyGpushare, opts)
	// Opportunistic jobs of another tenant fill the idle cluster.
	for _, id := range []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7"} {
		place(t, s, p, Request{ID: id, Shares: 100, VC: "team-b", Class: ClassOpportunistic})
	}
	// A guaranteed job outside any VC may only use what team-a does not
	// reserve: 4 GPUs, of which it holds 1 after this.
	place(t, s, p, Request{ID: "shared", Shares: 100})
	d := p.Decide(s, Request{ID: "shared-2", Count: 1, Shares: 400})
	must.Eq(t, RefusedQuota, d.Refusal.Code)
	must.StrContains(t, d.Refusal.Message, "opportunistic")
	// team-a gets its 4-GPU cell back by preempting opportunistic jobs only.
	d = p.Decide(s, Request{ID: "team-a-job", Count: 1, Shares: 400, VC: "team-a"})
	must.True(t, d.Placed(), must.Sprint(d.Refusal))
	must.Greater(t, 0, len(d.Preempt))
	for _, id := range d.Preempt {
		a, ok := s.Alloc(id)
		must.True(t, ok)
		must.Eq(t, ClassOpportunistic, a.Class)
	}
	must.StrContains(t, d.Placements[0].Reason, "preempts opportunistic")
	must.NoError(t, s.Apply(d))
	must.NoError(t, s.Check())
	_, stillThere := s.Alloc("shared[0]")
	must.True(t, stillThere)
	// Its quota is now used: a second guaranteed job is refused...
	d = p.Decide(s, Request{ID: "team-a-more", Count: 1, Shares: 100, VC: "team-a"})
	must.Eq(t, RefusedQuota, d.Refusal.Code)
	// ...but may run opportunistically if anything is idle.
	d = p.Decide(s, Request{ID: "team-a-opp", Count: 1, Shares: 10, VC: "team-a", Class: ClassOpportunistic})
	must.False(t, d.Placed()) // nothing idle, and opportunistic jobs never preempt
	must.Eq(t, 0, len(d.Preempt))
}

func TestGroupStacksFractionsOnOneGPUOnly(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n", GPUs: 2})
	p := policy(t, PolicyGpushare, Options{})
	d := place(t, s, p, Request{ID: "g", Count: 3, Shares: 30})
	must.Eq(t, 3, len(d.Placements))
	// All on one node, so all on one GPU (docs/gate-and-pin.md, "Several allocations").
	for _, pl := range d.Placements {
		must.Eq(t, d.Placements[0].GPUs, pl.GPUs)
	}
	// A count > 1 group of whole GPUs takes one allocation per node.
	s = cluster(t, NodeSpec{ID: "a", GPUs: 4}, NodeSpec{ID: "b", GPUs: 4})
	d = place(t, s, p, Request{ID: "w", Count: 2, Shares: 100})
	must.NotEq(t, d.Placements[0].Node, d.Placements[1].Node)
	d = p.Decide(s, Request{ID: "w3", Count: 3, Shares: 100})
	must.False(t, d.Placed())
}

func TestNomadNativeHandsOutWholeGPUs(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n", GPUs: 4})
	p := policy(t, PolicyNomadNative, Options{Seed: 7})
	d := place(t, s, p, Request{ID: "frac", Shares: 25})
	must.Eq(t, 100, len(d.Placements[0].Shares))
	must.Eq(t, 1, len(d.Placements[0].GPUs))
}

func TestApplyRejectsStaleDecisions(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "n", GPUs: 1})
	p := policy(t, PolicyFirstFit, Options{})
	d1 := p.Decide(s, Request{ID: "a", Count: 1, Shares: 60})
	d2 := p.Decide(s, Request{ID: "b", Count: 1, Shares: 60})
	must.NoError(t, s.Apply(d1))
	must.ErrorIs(t, s.Apply(d2), ErrConflict)
	must.NoError(t, s.Check())
	_, err := s.Remove("nope")
	must.ErrorIs(t, err, ErrUnknown)
}

func TestAvoidNodes(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 1}, NodeSpec{ID: "b", GPUs: 1})
	for _, name := range PolicyNames() {
		p := policy(t, name, Options{})
		d := p.Decide(s, Request{ID: "j", Count: 1, Shares: 10, Avoid: []string{"a"}})
		must.Eq(t, "b", d.Placements[0].Node, must.Sprint(name))
		d = p.Decide(s, Request{ID: "j", Count: 1, Shares: 10, Avoid: []string{"a", "b"}})
		must.False(t, d.Placed())
		must.StrContains(t, d.Refusal.Message, "avoids")
	}
}

func TestGroupPreemptsOpportunisticJobs(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", Rack: "r", GPUs: 4}, NodeSpec{ID: "b", Rack: "r", GPUs: 4}, NodeSpec{ID: "c", Rack: "q", GPUs: 4})
	p := policy(t, PolicyGpushare, Options{})
	for i := range 12 {
		class := ClassOpportunistic
		if i%4 == 0 {
			class = ClassNormal
		}
		place(t, s, p, Request{ID: "o" + itoa(i), Shares: 100, Class: class})
	}
	d := p.Decide(s, Request{ID: "dist", Count: 2, Shares: 300})
	must.True(t, d.Placed(), must.Sprint(d.Refusal))
	must.Eq(t, 6, len(d.Preempt))
	for _, id := range d.Preempt {
		a, _ := s.Alloc(id)
		must.Eq(t, ClassOpportunistic, a.Class)
	}
	must.NotEq(t, d.Placements[0].Node, d.Placements[1].Node)
	must.NoError(t, s.Apply(d))
	must.NoError(t, s.Check())
	// Opportunistic requests never preempt.
	d = p.Decide(s, Request{ID: "opp", Count: 2, Shares: 100, Class: ClassOpportunistic})
	must.False(t, d.Placed())
	must.Eq(t, 0, len(d.Preempt))
}

// A job's own bound comes before the configured one, which comes before the
// snapshot's default; zero means unset at each level.
func TestSnapshotBound(t *testing.T) {
	s := NewSnapshot()
	must.Eq(t, 0.5, s.Bound(0.5, 0.3))
	must.Eq(t, 0.3, s.Bound(0, 0.3))
	must.Eq(t, DefaultMaxSlowdown, s.Bound(0, 0))
	s.DefaultMaxSlowdown = 0.2
	must.Eq(t, 0.2, s.Bound(0, 0))
}
