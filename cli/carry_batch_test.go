package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// serveAllocs answers the reads of carryEnded: job etl's allocations and
// each one's details.
func serveAllocs(t *testing.T, allocs []*api.Allocation) *api.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/job/etl/allocations":
			var stubs []*api.AllocationListStub
			for _, a := range allocs {
				stubs = append(stubs, &api.AllocationListStub{ID: a.ID, Name: a.Name, TaskGroup: a.TaskGroup, ClientStatus: a.ClientStatus,
					DesiredStatus: a.DesiredStatus, CreateIndex: a.CreateIndex})
			}
			must.NoError(t, json.NewEncoder(w).Encode(stubs))
		case strings.HasPrefix(r.URL.Path, "/v1/allocation/"):
			for _, a := range allocs {
				if a.ID == strings.TrimPrefix(r.URL.Path, "/v1/allocation/") {
					must.NoError(t, json.NewEncoder(w).Encode(a))
					return
				}
			}
			http.NotFound(w, r)
		default:
			t.Errorf("unexpected read %s", r.URL.Path)
		}
	}))
	t.Cleanup(srv.Close)
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)
	return client
}

func batchJob(count int) *api.Job {
	id, name, typ, shares := "etl", "g", api.JobTypeBatch, uint64(25)
	return &api.Job{ID: &id, Name: &id, Type: &typ, TaskGroups: []*api.TaskGroup{{Name: &name, Count: &count,
		Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: &shares}}}}}}}}
}

// The same batch file carried over onto a version the scheduler wrote
// with its count lowered by what ended keeps that count, so that the
// registration is that version and Nomad runs nothing again; a count the
// names that ended do not explain is the file's.
func TestCarryEndedKeepsALoweredCount(t *testing.T) {
	alloc := func(id string, index int, status string, create uint64) *api.Allocation {
		return &api.Allocation{ID: id, Name: "etl.g[" + string(rune('0'+index)) + "]", TaskGroup: "g", ClientStatus: status,
			DesiredStatus: api.AllocDesiredStatusRun, CreateIndex: create}
	}
	ran := []*api.Allocation{alloc("a", 0, api.AllocClientStatusComplete, 10), alloc("b", 1, api.AllocClientStatusRunning, 11),
		alloc("c", 2, api.AllocClientStatusRunning, 12)}

	next := batchJob(3)
	carryEnded(serveAllocs(t, ran), batchJob(2), next, "g")
	must.Eq(t, 2, pin.Count(next.TaskGroups[0]), must.Sprint("one ended: the running version's count"))

	next = batchJob(4) // scaled in the file: one ended explains one of two
	carryEnded(serveAllocs(t, ran), batchJob(2), next, "g")
	must.Eq(t, 4, pin.Count(next.TaskGroups[0]))

	next = batchJob(3) // nothing ended: nothing lowered it
	carryEnded(serveAllocs(t, []*api.Allocation{alloc("b", 1, api.AllocClientStatusRunning, 11)}), batchJob(2), next, "g")
	must.Eq(t, 3, pin.Count(next.TaskGroups[0]))

	next = batchJob(3) // the same count: nothing read
	carryEnded(nil, batchJob(3), next, "g")
	must.Eq(t, 3, pin.Count(next.TaskGroups[0]))
}
