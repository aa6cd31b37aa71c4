package jobspecs

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func TestCheckVC(t *testing.T) {
	ptr := func(s string) *string { return &s }
	job := func(ns, vc string) *api.Job {
		n := 1
		c := uint64(25)
		return &api.Job{ID: ptr("j"), Namespace: ptr(ns), Meta: map[string]string{pin.MetaVC: vc},
			TaskGroups: []*api.TaskGroup{{Name: ptr("g"), Count: &n, Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{
				Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: &c}}}}}}}}
	}
	vcs := []VC{{Name: "research", Namespaces: []string{"team-a"}}, {Name: "open"}}
	must.SliceEmpty(t, CheckVC(job("team-a", "research"), vcs))
	must.SliceEmpty(t, CheckVC(job("team-b", "open"), vcs))
	f := CheckVC(job("team-b", "research"), vcs)
	must.SliceLen(t, 1, f)
	must.StrContains(t, f[0].String(), "admits only namespaces team-a; this job is in team-b")
	f = CheckVC(job("default", "nobody"), vcs)
	must.SliceLen(t, 1, f)
	must.StrContains(t, f[0].String(), `gpushare.vc = "nobody" names no virtual cluster of the scheduler (it has: research, open)`)
	must.SliceEmpty(t, CheckVC(job("default", ""), nil))
	// a request with another problem (a profile only the scheduler knows)
	// still has its VC checked
	odd := job("default", "nobody")
	odd.Meta[pin.MetaProfile] = "bert-large"
	must.SliceLen(t, 1, CheckVC(odd, vcs))
}
