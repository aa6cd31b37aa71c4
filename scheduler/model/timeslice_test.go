package model

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// gpushare.timeslice (job or group meta, group wins) makes a group's
// request and its allocations time-sliced; a value other than "true" or
// "false" is an error naming the key.
func TestTimesliceMetaReachesRequestAndAllocations(t *testing.T) {
	s := New()
	job := func(id string, jobMeta, groupMeta map[string]string) *api.Job {
		name := "g"
		return &api.Job{ID: &id, Name: &id, Meta: jobMeta, TaskGroups: []*api.TaskGroup{{Name: &name, Meta: groupMeta, Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptrU(30)}}}}}}}}
	}
	on := map[string]string{pin.MetaTimeslice: "true"}
	off := map[string]string{pin.MetaTimeslice: "false"}
	for _, c := range []struct {
		jobMeta, groupMeta map[string]string
		want               bool
	}{{nil, nil, false}, {on, nil, true}, {nil, on, true}, {on, off, false}, {off, nil, false}} {
		r, err := s.Request(job("a", c.jobMeta, c.groupMeta), "g", interference.Default())
		must.NoError(t, err)
		must.Eq(t, c.want, r.Timeslice, must.Sprintf("job %v group %v", c.jobMeta, c.groupMeta))
	}
	_, err := s.Request(job("a", nil, map[string]string{pin.MetaTimeslice: "yes"}), "g", interference.Default())
	must.ErrorContains(t, err, `gpushare.timeslice "yes" must be "true"`)

	j := job("ts", nil, on)
	s.Jobs[JobKey("default", "ts")] = j
	ns, jobID, group := "default", "ts", "g"
	a := s.allocOf(&api.Allocation{ID: "alloc-1", Namespace: ns, JobID: jobID, TaskGroup: group}, interference.Default())
	must.True(t, a.Timeslice)
	plain := a
	plain.Timeslice = false
	must.False(t, sameGroupFacts(a, plain))
}
