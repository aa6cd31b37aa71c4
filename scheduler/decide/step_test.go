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

var now = time.Unix(100000, 0)

// node builds a snapshot node from a shipped fixture.
func node(t *testing.T, id, file string) *placement.Node {
	t.Helper()
	src, err := fixtures.FS.ReadFile(file)
	must.NoError(t, err)
	st, err := fixture.Parse(file, src)
	must.NoError(t, err)
	n, err := placement.NodeFromGroups(id, id, placement.Resources{CPU: 64000, MemoryMiB: 512 << 10}, nil, devicefn.Groups(&st.Inventory, 100, "mps", nil))
	must.NoError(t, err)
	return n
}

func snapshot(t *testing.T, files ...string) *placement.Snapshot {
	t.Helper()
	s := placement.NewSnapshot()
	for i, f := range files {
		must.NoError(t, s.AddNode(node(t, "n"+string(rune('1'+i)), f)))
	}
	return s
}

func policy(t *testing.T) placement.Policy {
	t.Helper()
	p, err := placement.New(placement.PolicyGpushare, placement.Options{})
	must.NoError(t, err)
	return p
}

func group(job string, count, shares int, waited, expected time.Duration) Group {
	k := Key{Namespace: "default", Job: job, Group: "g"}
	return Group{Key: k, Req: placement.Request{ID: k.String(), Count: count, Shares: shares, Expected: expected}, Submit: now.Add(-waited)}
}

// busy runs an allocation of whole GPUs gpus of node n1, ending in d.
func busy(t *testing.T, s *placement.Snapshot, ends map[string]time.Time, id string, gpus []int, d time.Duration) {
	t.Helper()
	n, _ := s.Node("n1")
	var shares []string
	for _, g := range gpus {
		for k := range 100 {
			shares = append(shares, devicefn.ShareID{UUID: n.GPUs[g].UUID, Index: k}.String())
		}
	}
	must.NoError(t, s.AddAlloc(placement.Alloc{ID: id, Node: "n1", Shares: shares}))
	ends[id] = now.Add(d)
}

func kinds(as []Action) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Kind.String()+" "+a.Group.Job)
	}
	return out
}

func cfg() Config { return Config{DefaultExpected: time.Hour, Reservations: true} }

// The queue: guaranteed tenants first, then the highest response ratio;
// a VC that is not configured is not guaranteed.
func TestOrder(t *testing.T) {
	gs := []Group{
		group("old-long", 1, 10, 2*time.Hour, 10*time.Hour), // (2+10)/10 = 1.2
		group("short", 1, 10, time.Second, time.Minute),     // 1.02
		group("waited", 1, 10, 30*time.Minute, 10*time.Minute),
		group("forged-vc", 1, 10, 0, time.Hour),
		group("tenant", 1, 10, 0, time.Hour),
	}
	gs[3].Req.VC = "nobody"
	gs[4].Req.VC = "team-a"
	c := cfg()
	c.VCs = []string{"team-a"}
	var got []string
	for _, q := range order(gs, now, c) {
		got = append(got, q.Key.Job)
	}
	must.Eq(t, []string{"tenant", "waited", "old-long", "short", "forged-vc"}, got)
	// first come, first served when nobody declares a run time
	for i := range gs {
		gs[i].Req.Expected, gs[i].Req.VC = 0, ""
	}
	got = got[:0]
	for _, q := range order(gs, now, c) {
		got = append(got, q.Key.Job)
	}
	must.Eq(t, []string{"old-long", "waited", "short", "forged-vc", "tenant"}, got)
}

// Decisions in one step see each other; the snapshot is left as found.
func TestStepPinsInOrderAndLeavesTheSnapshot(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	before := s.Usage()
	gs := []Group{group("a", 1, 400, 0, time.Hour), group("b", 1, 400, 0, time.Hour), group("c", 1, 400, 0, time.Hour)}
	as := Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, cfg())
	must.Eq(t, []string{"pin a", "pin b", "wait c", "reserve c"}, kinds(as))
	must.Eq(t, before, s.Usage())
	must.SliceEmpty(t, s.Allocs())
	must.StrContains(t, as[2].Reason, "position 3 of 3 in the queue")
	// the two quads are the DGX-1's two NUMA halves
	gpusA, gpusB := as[0].Decision.Placements[0].GPUs, as[1].Decision.Placements[0].GPUs
	for _, g := range gpusA {
		must.SliceNotContains(t, gpusB, g)
	}
}

// A group no state of the cluster could hold is refused for good with what
// to change; one that only needs capacity to free waits.
func TestRefuseForGood(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "run", []int{0, 1, 2, 3, 4, 5, 6, 7}, time.Hour)
	gs := []Group{
		group("sixteen", 1, 1600, 0, 0),
		group("three-nodes", 3, 800, 0, 0),
		group("model", 1, 100, 0, 0),
		group("later", 1, 800, 0, 0),
		group("huge-count", 1000, 100, 0, 0),
	}
	gs[2].Req.Models = []string{"H100"}
	as := Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())
	got := map[string]Action{}
	for _, a := range as {
		if _, seen := got[a.Group.Job]; !seen {
			got[a.Group.Job] = a
		}
	}
	must.Eq(t, Refuse, got["sixteen"].Kind)
	must.StrContains(t, got["sixteen"].Reason, "the largest node has 8")
	must.Eq(t, Refuse, got["three-nodes"].Kind)
	must.StrContains(t, got["three-nodes"].Reason, "even empty, the cluster's 1 nodes could hold 1")
	must.Eq(t, Refuse, got["model"].Kind)
	must.Eq(t, Refuse, got["huge-count"].Kind)
	must.Eq(t, Wait, got["later"].Kind)
}

// EASY backfilling: the blocked 8-GPU group holds the node that frees
// within its run time; a group behind it that would end after that may not
// use the node, one that ends before may.
func TestReservationWithBackfilling(t *testing.T) {
	run := func(c Config, tail time.Duration) []Action {
		s := snapshot(t, fixtures.DGX1V100)
		ends := map[string]time.Time{}
		busy(t, s, ends, "three", []int{0, 1, 2}, 5*time.Minute)
		busy(t, s, ends, "four", []int{3, 4, 5, 6}, 2*time.Hour)
		gs := []Group{group("big", 1, 800, time.Minute, 3*time.Hour), group("tail", 1, 100, 0, tail)}
		return Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, c)
	}
	as := run(cfg(), 5*time.Hour)
	must.Eq(t, []string{"wait big", "reserve big", "wait tail"}, kinds(as))
	must.Eq(t, map[string]time.Time{"n1": now.Add(2 * time.Hour)}, as[1].Hold)
	must.StrContains(t, as[2].Reason, "1 node(s) are held for default/big/g")
	must.Eq(t, []string{"wait big", "reserve big", "pin tail"}, kinds(run(cfg(), 30*time.Minute)))
	off := cfg()
	off.Reservations = false
	must.Eq(t, []string{"wait big", "pin tail"}, kinds(run(off, 5*time.Hour)))
}

// An allocation whose end has passed was declared wrong: it is taken to
// need the default length, in the hold as in the rule that sharing must
// beat waiting (left), not to end "any moment", which would hold its node
// from now for a job that is late.
func TestALateAllocationIsExpectedTheDefaultLength(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "late", []int{0, 1, 2, 3, 4, 5, 6}, -10*time.Minute)
	gs := []Group{group("big", 1, 800, time.Minute, 3*time.Hour)}
	as := Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())
	must.Eq(t, []string{"wait big", "reserve big"}, kinds(as))
	must.Eq(t, map[string]time.Time{"n1": now.Add(cfg().DefaultExpected)}, as[1].Hold)

	st := &step{in: Input{Snapshot: s, Now: now, Ends: ends}, cfg: cfg()}
	must.Eq(t, cfg().DefaultExpected, st.left("late"))
}

// A group that declares no run time holds no nodes: the ends it would wait
// for are guesses, and nodes held on guesses idle.
func TestNoReservationWithoutADeclaredRunTime(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "three", []int{0, 1, 2}, 5*time.Minute)
	busy(t, s, ends, "four", []int{3, 4, 5, 6}, 2*time.Hour)
	gs := []Group{group("big", 1, 800, time.Minute, 0), group("tail", 1, 100, 0, 5*time.Hour)}
	must.Eq(t, []string{"wait big", "pin tail"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())))
}

// No reservation when the GPUs would idle longer than the group then runs.
func TestNoReservationLongerThanTheGroup(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "seven", []int{0, 1, 2, 3, 4, 5, 6}, 2*time.Hour)
	gs := []Group{group("big", 1, 800, time.Minute, time.Hour), group("tail", 1, 100, 0, 5*time.Hour)}
	must.Eq(t, []string{"wait big", "pin tail"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())))
}

// IdleFirst: fractions take idle GPUs while there are any, then share.
func TestIdleFirst(t *testing.T) {
	s := snapshot(t, fixtures.PCIe4GPU)
	var gs []Group
	for _, j := range []string{"a", "b", "c", "d", "e"} {
		gs = append(gs, group(j, 1, 50, 0, time.Hour))
	}
	gpus := func(c Config) map[string]int {
		out := map[string]int{}
		for _, a := range Step(policy(t), Input{Snapshot: s, Groups: gs, Now: now}, c) {
			must.Eq(t, Pin, a.Kind)
			must.SliceLen(t, 50, a.Decision.Placements[0].Shares)
			out[a.Decision.Placements[0].GPUs[0]]++
		}
		return out
	}
	c := cfg()
	must.MapLen(t, 3, gpus(c)) // packed by fragmentation: 2 + 2 + 1
	c.IdleFirst = true
	must.MapLen(t, 4, gpus(c)) // one per GPU, then the fifth shares
}

// halvesOnTwoNodes is a PCIe node (n1) and a DGX-1 (n2) with an
// allocation on half of each GPU, named <node>-half<GPU index>.
func halvesOnTwoNodes(t *testing.T) *placement.Snapshot {
	t.Helper()
	s := snapshot(t, fixtures.PCIe4GPU, fixtures.DGX1V100)
	for _, id := range []string{"n1", "n2"} {
		n, _ := s.Node(id)
		for i := range n.GPUs {
			var shares []string
			for k := range 50 {
				shares = append(shares, devicefn.ShareID{UUID: n.GPUs[i].UUID, Index: k}.String())
			}
			must.NoError(t, s.AddAlloc(placement.Alloc{ID: id + "-half" + string(rune('0'+i)), Node: id, Shares: shares}))
		}
	}
	return s
}

// Compatible steers a group away from nodes where the GPU the core chose
// holds an allocation it may not share with.
func TestCompatible(t *testing.T) {
	s := halvesOnTwoNodes(t)
	gs := []Group{group("x", 1, 50, 0, time.Hour)}
	in := Input{Snapshot: s, Groups: gs, Now: now, Compatible: func(Key, string) bool { return false }}
	must.Eq(t, []string{"wait x"}, kinds(Step(policy(t), in, cfg())))
	for _, ok := range []string{"n1", "n2"} {
		in.Compatible = func(_ Key, alloc string) bool { return alloc[:2] == ok }
		as := Step(policy(t), in, cfg())
		must.Eq(t, []string{"pin x"}, kinds(as))
		must.Eq(t, ok, as[0].Decision.Placements[0].Node)
	}
}

// A new version may take the shares of the allocations it replaces; when
// it does not fit they are put back.
func TestReplaces(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "old", []int{0, 1, 2, 3, 4, 5, 6, 7}, time.Hour)
	g := group("a", 1, 800, 0, time.Hour)
	must.Eq(t, []string{"wait a", "reserve a"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Now: now, Ends: ends}, cfg())))
	g.Replaces = []string{"old"}
	must.Eq(t, []string{"pin a"}, kinds(Step(policy(t), Input{Snapshot: s, Groups: []Group{g}, Now: now, Ends: ends}, cfg())))
	_, ok := s.Alloc("old")
	must.True(t, ok)
}

// Step is deterministic: the same input gives the same actions.
func TestStepDeterministic(t *testing.T) {
	var gs []Group
	for i, sh := range []int{25, 200, 50, 800, 100, 25, 400} {
		gs = append(gs, group(string(rune('a'+i)), 1, sh, time.Duration(i)*time.Minute, time.Hour))
	}
	first := kinds(Step(policy(t), Input{Snapshot: snapshot(t, fixtures.DGX1V100), Groups: gs, Now: now}, cfg()))
	for range 3 {
		must.Eq(t, first, kinds(Step(policy(t), Input{Snapshot: snapshot(t, fixtures.DGX1V100), Groups: gs, Now: now}, cfg())))
	}
}

// A group that its job's own rules allow on some nodes only holds those:
// never the node that frees first if Nomad could not place it there.
func TestReservationOnlyOnAllowedNodes(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		want    string
	}{{nil, "n2"}, {[]string{"n1"}, "n1"}} {
		s := snapshot(t, fixtures.DGX1V100, fixtures.HGXH100)
		ends := map[string]time.Time{}
		busy(t, s, ends, "four", []int{0, 1, 2, 3}, 2*time.Hour)
		n2, _ := s.Node("n2")
		var shares []string
		for _, g := range []int{0, 1, 2, 3} {
			for k := range 100 {
				shares = append(shares, devicefn.ShareID{UUID: n2.GPUs[g].UUID, Index: k}.String())
			}
		}
		must.NoError(t, s.AddAlloc(placement.Alloc{ID: "soon", Node: "n2", Shares: shares}))
		ends["soon"] = now.Add(10 * time.Minute)
		big := group("big", 1, 800, time.Minute, 3*time.Hour)
		big.Req.Allowed = tc.allowed
		as := Step(policy(t), Input{Snapshot: s, Groups: []Group{big}, Now: now, Ends: ends}, cfg())
		must.Eq(t, []string{"wait big", "reserve big"}, kinds(as))
		must.MapContainsKey(t, as[1].Hold, tc.want)
		must.MapLen(t, 1, as[1].Hold)
	}
}

// counting is a policy that counts the requests it decides.
type counting struct {
	placement.Policy
	decided map[string]int
}

func (c *counting) Decide(s *placement.Snapshot, r placement.Request) *placement.Decision {
	c.decided[r.ID]++
	return c.Policy.Decide(s, r)
}

// A request refused is not decided again in the same step for a group of
// the same shape until something is placed: the groups after it wait with
// its refusal; a group of another shape is decided, and once it is
// placed, the refused shape is decided again.
func TestARefusedShapeIsNotDecidedAgainUntilSomethingIsPlaced(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	pol := &counting{Policy: policy(t), decided: map[string]int{}}
	groups := []Group{
		group("big-1", 1, 900, 4*time.Hour, time.Hour), // 9 GPUs: a node has 8
		group("big-2", 1, 900, 3*time.Hour, time.Hour),
		group("small", 1, 50, 2*time.Hour, time.Hour),
		group("big-3", 1, 900, time.Hour, time.Hour),
	}
	as := Step(pol, Input{Snapshot: s, Groups: groups, Now: now}, Config{DefaultExpected: time.Hour})
	must.Eq(t, map[string]int{"default/big-1/g": 1, "default/small/g": 1, "default/big-3/g": 1}, pol.decided)
	refused := 0
	for _, a := range as {
		if a.Group.Job == "big-2" {
			refused++
			must.NotEq(t, Pin, a.Kind)
		}
	}
	must.Positive(t, refused)
}

// StepThenRestore returns the actions with the step's changes still on
// the snapshot (its placements, the allocations it released taken out):
// restore puts it back as found, once; a second call changes nothing.
// A policy that panics mid-step leaves the snapshot as found.
func TestStepThenRestoreLeavesTheSnapshotUntilRestored(t *testing.T) {
	s := snapshot(t, fixtures.DGX1V100)
	ends := map[string]time.Time{}
	busy(t, s, ends, "old", []int{0, 1}, time.Hour)
	before, allocs := s.Usage(), s.Allocs()
	g := group("a", 1, 200, time.Hour, time.Hour)
	g.Replaces = []string{"old"}
	gs := []Group{g, group("b", 1, 400, 0, time.Hour)}
	as, restore := StepThenRestore(policy(t), Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())
	must.Eq(t, []string{"pin a", "pin b"}, kinds(as))
	_, ok := s.Alloc("old")
	must.False(t, ok) // released for a's new version, not yet put back
	for _, a := range as {
		_, ok := s.Alloc(a.Decision.Placements[0].AllocID)
		must.True(t, ok)
	}
	restore()
	must.Eq(t, before, s.Usage())
	must.Eq(t, allocs, s.Allocs())
	restore()
	must.Eq(t, allocs, s.Allocs())

	pol := &panicking{Policy: policy(t), after: 1}
	func() {
		defer func() { must.NotNil(t, recover()) }()
		StepThenRestore(pol, Input{Snapshot: s, Groups: gs, Now: now, Ends: ends}, cfg())
	}()
	must.Eq(t, before, s.Usage())
	must.Eq(t, allocs, s.Allocs())
}

// panicking is a policy that panics at its decision after the first ones.
type panicking struct {
	placement.Policy
	after int
}

func (p *panicking) Decide(s *placement.Snapshot, r placement.Request) *placement.Decision {
	if p.after == 0 {
		panic("policy failed")
	}
	p.after--
	return p.Policy.Decide(s, r)
}

// A waiting group whose run time the service learned from its previous
// runs (none declared) says so, and what it was learned from.
func TestAWaitSaysItsRunTimeWasLearned(t *testing.T) {
	for n, want := range map[int]string{
		0: "(response ratio 1.00)",
		1: "(response ratio 1.00, expected run time 1h0m0s as its last run took)",
		3: "(response ratio 1.00, expected run time 1h0m0s, the median of its last 3 runs)",
	} {
		gs := []Group{group("a", 1, 400, 0, time.Hour), group("b", 1, 400, 0, time.Hour), group("c", 1, 400, 0, time.Hour)}
		gs[2].Req.LearnedFrom = n
		as := Step(policy(t), Input{Snapshot: snapshot(t, fixtures.DGX1V100), Groups: gs, Now: now}, cfg())
		must.Eq(t, []string{"pin a", "pin b", "wait c", "reserve c"}, kinds(as))
		must.StrContains(t, as[2].Reason, want)
	}
}
