package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func opportunisticJob() *api.Job {
	id, name, ns, count := "scavenger", "g", "default", uint64(25)
	return &api.Job{ID: &id, Name: &id, Namespace: &ns, TaskGroups: []*api.TaskGroup{{
		Name: &name, Constraints: []*api.Constraint{pin.Gate()}, Meta: map[string]string{pin.MetaClass: "opportunistic"},
		Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: &count}}}}},
	}}}
}

// `gpushare job run` of a new version carries the pins and the run-time
// priority the scheduler wrote with them.
func TestCarryPinsCarriesPriority(t *testing.T) {
	old := opportunisticJob()
	_, err := pin.PinWith(old, "g", &placement.Decision{Placements: []placement.Placement{{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0"}}}},
		pin.Runtime{Sharing: devicefn.SharingMPS, SharesPerGPU: 100, ClientPriority: 1})
	must.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/job/scavenger", r.URL.Path)
		must.NoError(t, json.NewEncoder(w).Encode(old))
	}))
	defer srv.Close()
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)

	next := opportunisticJob()
	must.Eq(t, []string{"g"}, carryPins(client, next))
	must.Eq(t, map[string]string{pin.EnvMPSClientPriority: "1"}, next.TaskGroups[0].Tasks[0].Env)
}
