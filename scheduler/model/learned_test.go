package model

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// Two groups that learned the same fractions are two jobs to the
// interference knowledge: each learned profile is named after its group.
func TestLearnedProfilesAreNamedPerGroup(t *testing.T) {
	s := New()
	job := func(id string) *api.Job {
		name := "g"
		return &api.Job{ID: &id, Name: &id, TaskGroups: []*api.TaskGroup{{Name: &name, Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptrU(25)}}}}}}}}
	}
	learned := interference.Profile{Name: "learned", SM: 0.4, MemBW: 0.2}
	s.Learn("default/a/g", learned)
	s.Learn("default/b/g", learned)
	ra, err := s.Request(job("a"), "g", interference.Default())
	must.NoError(t, err)
	rb, err := s.Request(job("b"), "g", interference.Default())
	must.NoError(t, err)
	must.Eq(t, LearnedName("default/a/g"), ra.Profile.Name)
	must.Eq(t, 0.4, ra.Profile.SM)
	must.NotEq(t, ra.Profile.Key(), rb.Profile.Key())

	// A group with no profile yet, or declared fractions, is its own job to
	// the knowledge too: two of them never share a key.
	rc, err := s.Request(job("c"), "g", interference.Default())
	must.NoError(t, err)
	rd, err := s.Request(job("d"), "g", interference.Default())
	must.NoError(t, err)
	must.False(t, rc.Profile.Known())
	must.Eq(t, "default/c/g", rc.Profile.Key())
	must.NotEq(t, rc.Profile.Key(), rd.Profile.Key())
}

func ptrU(v uint64) *uint64 { return &v }
