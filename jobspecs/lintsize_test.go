package jobspecs

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func sharesJob(count uint64) *api.Job {
	id, name := "j", "g"
	return &api.Job{ID: &id, TaskGroups: []*api.TaskGroup{{Name: &name, Tasks: []*api.Task{{Name: "t",
		Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: &count}}}}}}}}
}

// A request of more whole GPUs than the largest node holds can never be
// placed (an allocation's GPUs are on one node): an error naming that
// node against the cluster's nodes, a warning past 8 GPUs without them.
func TestCheckSize(t *testing.T) {
	cluster := []NodeGPUs{{Name: "pcie", GPUs: 4}, {Name: "dgx", GPUs: 8}}
	got := CheckSize(sharesJob(900), 100, cluster)
	must.SliceLen(t, 1, got)
	must.EqOp(t, Error, got[0].Severity)
	must.StrContains(t, got[0].Message, "count = 900 shares is 9 whole GPUs in one allocation")
	must.StrContains(t, got[0].Message, "the cluster's largest node, dgx, has 8")
	must.StrContains(t, got[0].Message, "ask for at most 800 shares per allocation")
	must.SliceEmpty(t, CheckSize(sharesJob(800), 100, cluster))
	must.SliceEmpty(t, CheckSize(sharesJob(25), 100, cluster))
	must.SliceEmpty(t, CheckSize(sharesJob(950), 100, cluster)) // not whole GPUs: Lint's error

	got = CheckSize(sharesJob(900), 100, nil)
	must.SliceLen(t, 1, got)
	must.EqOp(t, Warning, got[0].Severity)
	must.StrContains(t, got[0].Message, "pass -scheduler")
	must.SliceEmpty(t, CheckSize(sharesJob(800), 100, nil))
	must.SliceLen(t, 1, CheckSize(sharesJob(900), 100, []NodeGPUs{}))
}
