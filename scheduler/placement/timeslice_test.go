package placement

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// sharingPolicies are the policies that place fractions on shared GPUs
// (hived and nomad-native take a whole GPU for a fraction).
func sharingPolicies(t *testing.T, opts Options) map[string]Policy {
	out := map[string]Policy{}
	for _, name := range PolicyNames() {
		p := policy(t, name, opts)
		if p.(*engine).rounds() {
			continue
		}
		out[name] = p
	}
	must.MapLen(t, 6, out)
	return out
}

// A time-sliced allocation never joins a GPU that holds one that is not.
func TestTimeslicedNeverBesideCapped(t *testing.T) {
	for name, p := range sharingPolicies(t, Options{}) {
		s := cluster(t, NodeSpec{ID: "a", GPUs: 1})
		place(t, s, p, Request{ID: "capped", Shares: 30})
		d := p.Decide(s, Request{ID: "ts", Count: 1, Shares: 30, Timeslice: true})
		must.False(t, d.Placed(), must.Sprint(name))
		must.Eq(t, RefusedNoCapacity, d.Refusal.Code, must.Sprint(name))
		must.StrContains(t, d.Refusal.Message, "only time-sliced allocations", must.Sprint(name))
		// with a second, idle GPU it goes there
		s = cluster(t, NodeSpec{ID: "a", GPUs: 2})
		capped := place(t, s, p, Request{ID: "capped", Shares: 30})
		ts := place(t, s, p, Request{ID: "ts", Shares: 30, Timeslice: true})
		must.NotEq(t, capped.Placements[0].GPUs, ts.Placements[0].GPUs, must.Sprint(name))
	}
}

// A GPU that holds a time-sliced allocation takes no other kind.
func TestCappedNeverBesideTimesliced(t *testing.T) {
	for name, p := range sharingPolicies(t, Options{}) {
		s := cluster(t, NodeSpec{ID: "a", GPUs: 1})
		place(t, s, p, Request{ID: "ts", Shares: 30, Timeslice: true})
		d := p.Decide(s, Request{ID: "capped", Count: 1, Shares: 30})
		must.False(t, d.Placed(), must.Sprint(name))
		must.StrContains(t, d.Refusal.Message, "time-sliced allocations", must.Sprint(name))
		// a CPU-only job is no GPU's kind: it runs on the node
		place(t, s, p, Request{ID: "cpu", Res: Resources{CPU: 100}})
	}
}

// At most TimesliceMaxPerGPU time-sliced allocations share a GPU, though
// a fifth's memory fits.
func TestTimeslicedAtMostMaxPerGPU(t *testing.T) {
	for _, max := range []int{0, 4, 5} {
		p := policy(t, PolicyGpushare, Options{TimesliceMaxPerGPU: max})
		s := cluster(t, NodeSpec{ID: "a", GPUs: 1})
		for i := range 4 {
			place(t, s, p, Request{ID: "ts" + string(rune('0'+i)), Shares: 20, Timeslice: true})
		}
		g := &s.Nodes()[0].GPUs[0]
		must.Eq(t, 4, g.Timesliced())
		must.Eq(t, 20, g.Free())
		d := p.Decide(s, Request{ID: "fifth", Count: 1, Shares: 20, Timeslice: true})
		must.Eq(t, max == 5, d.Placed(), must.Sprintf("max %d", max))
		if max != 5 {
			must.StrContains(t, d.Refusal.Message, "already 4 time-sliced ones")
		}
	}
	_, err := New(PolicyGpushare, Options{TimesliceMaxPerGPU: -1})
	must.ErrorContains(t, err, "at least 1")
}

// Their shares are GPU memory: all of them stay on the GPU, so together
// they fit the GPU's shares as any fractions do.
func TestTimeslicedMemoryMustFit(t *testing.T) {
	p := policy(t, PolicyGpushare, Options{})
	s := cluster(t, NodeSpec{ID: "a", GPUs: 1})
	place(t, s, p, Request{ID: "ts1", Shares: 60, Timeslice: true})
	d := p.Decide(s, Request{ID: "ts2", Count: 1, Shares: 60, Timeslice: true})
	must.False(t, d.Placed())
	must.StrContains(t, d.Refusal.Message, "needs 60 shares")
	place(t, s, p, Request{ID: "ts3", Shares: 40, Timeslice: true})
	must.Eq(t, 0, s.Nodes()[0].GPUs[0].Free())
}

// Jobs whose compute would break each other's bound beside each other
// take turns on one GPU instead when they opt in: the interference model
// does not apply to them, and their allocations record the kind.
func TestTimeslicedStackWhereCappedCannot(t *testing.T) {
	hog := interference.Profile{Name: "hog", SM: 0.95, MemBW: 0.9}
	p := policy(t, PolicyGpushare, Options{})
	s := cluster(t, NodeSpec{ID: "a", GPUs: 1})
	place(t, s, p, Request{ID: "p1", Shares: 40, Class: ClassProduction, Profile: hog})
	d := p.Decide(s, Request{ID: "p2", Count: 1, Shares: 40, Class: ClassProduction, Profile: hog})
	must.False(t, d.Placed())
	must.Eq(t, RefusedInterference, d.Refusal.Code)

	s = cluster(t, NodeSpec{ID: "a", GPUs: 1})
	place(t, s, p, Request{ID: "t1", Shares: 40, Class: ClassProduction, Profile: hog, Timeslice: true})
	d = place(t, s, p, Request{ID: "t2", Shares: 40, Class: ClassProduction, Profile: hog, Timeslice: true})
	must.Eq(t, 1.0, d.Placements[0].Predicted)
	must.StrContains(t, d.Placements[0].Reason, "time-sliced, takes turns on its GPU with t1[0]")
	a, ok := s.Alloc("t2[0]")
	must.True(t, ok)
	must.True(t, a.Timeslice)
	must.Eq(t, 2, s.Nodes()[0].GPUs[0].Timesliced())
	// removing them gives the GPU back to any kind
	for _, id := range []string{"t1[0]", "t2[0]"} {
		_, err := s.Remove(id)
		must.NoError(t, err)
	}
	must.Eq(t, 0, s.Nodes()[0].GPUs[0].Timesliced())
	place(t, s, p, Request{ID: "capped", Shares: 40})
}

// Nomad's own pick of a GPU knows nothing of time-slicing: a time-sliced
// decision is never left to it, and Prefer keeps the kinds apart.
func TestTimeslicedNotLeftToNomadNorPreferredBesideCapped(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 2, PerGPU: true})
	p := policy(t, PolicyGpushare, Options{})
	capped := p.Decide(s, Request{ID: "capped", Count: 1, Shares: 30})
	must.True(t, s.NomadChoosesGPU(capped))
	ts := p.Decide(s, Request{ID: "ts", Count: 1, Shares: 30, Timeslice: true})
	must.False(t, s.NomadChoosesGPU(ts))

	must.NoError(t, s.Apply(capped))
	held := []Held{{Node: "a", Shares: capped.Placements[0].Shares[:10]}}
	_, err := s.Prefer(&Request{ID: "ts", Count: 1, Shares: 10, Timeslice: true}, PolicyGpushare, held)
	must.ErrorContains(t, err, "a GPU holds one kind")
	_, err = s.Prefer(&Request{ID: "more", Count: 1, Shares: 10}, PolicyGpushare, held)
	must.NoError(t, err)
}
