package model

import (
	"maps"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// An allocation counts for the VC and class its signed placement was made
// for, in a namespace that is managed and that the VC admits; never for
// what its job's meta says now.
func TestAttributionIsTheSignedPlacements(t *testing.T) {
	// next registers a new version of job j: meta edited, and gated again
	// from its jobspec (no pin) when gate is set
	next := func(s *State, ns string, meta map[string]string, gate bool) {
		old := s.Jobs[JobKey(ns, "j")]
		job := *old
		job.ModifyIndex = ptr(*old.ModifyIndex + 1)
		job.Meta = meta
		tg := *old.TaskGroups[0]
		tg.Meta = maps.Clone(tg.Meta)
		if gate {
			tg.Meta, tg.Constraints = nil, []*api.Constraint{pin.Gate()}
		}
		job.TaskGroups = []*api.TaskGroup{&tg}
		s.PutJob(&job)
	}
	for _, tc := range []struct {
		name      string
		ns        string
		vc, class string // the job's meta when pinned
		signed    bool
		after     func(s *State, ns string)
		wantVC    string
		wantClass placement.Class
	}{
		{name: "signed for an admitted VC", ns: "research", vc: "research", class: "opportunistic", signed: true,
			wantVC: "research", wantClass: placement.ClassOpportunistic},
		{name: "meta edited after the pin", ns: "research", class: "opportunistic", signed: true,
			after: func(s *State, ns string) {
				next(s, ns, map[string]string{pin.MetaVC: "research", pin.MetaClass: "production"}, false)
			}, wantClass: placement.ClassOpportunistic},
		{name: "gated again: the earlier pin its allocations run under", ns: "research", vc: "research", class: "production", signed: true,
			after: func(s *State, ns string) { next(s, ns, nil, true) }, wantVC: "research", wantClass: placement.ClassProduction},
		{name: "never placed by the scheduler", ns: "research", vc: "research", class: "opportunistic",
			wantClass: placement.ClassNormal},
		{name: "a VC that does not admit the namespace", ns: "default", vc: "research", class: "production", signed: true,
			wantClass: placement.ClassProduction},
		{name: "an unmanaged namespace", ns: "outside", vc: "research", class: "opportunistic", signed: true,
			wantClass: placement.ClassNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			s.Managed = func(ns string) bool { return ns != "outside" }
			s.Admits = func(vc, ns string) bool { return vc == "research" && ns == "research" }
			s.PutNode(pcieNode(t, "n1"))
			job := gatedJob("j", 30)
			job.Namespace = ptr(tc.ns)
			job.Meta = map[string]string{pin.MetaVC: tc.vc, pin.MetaClass: tc.class}
			if tc.signed {
				_, err := pin.Pin(job, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
					{Node: "n1", GPUs: []string{gpu0}, Shares: []string{gpu0 + ":0"}}}})
				must.NoError(t, err)
			} else {
				job.TaskGroups[0].Constraints = nil // ungated: Nomad placed it
			}
			s.PutJob(job)
			a := shareAlloc("a", "j", "n1", 0, 30)
			a.Namespace = tc.ns
			s.PutAlloc(a)
			if tc.after != nil {
				tc.after(s, tc.ns)
			}
			got, ok := s.Snapshot(nil, nil).Snapshot.Alloc("a")
			must.True(t, ok)
			must.Eq(t, tc.wantVC, got.VC)
			must.Eq(t, tc.wantClass, got.Class)
		})
	}
}
