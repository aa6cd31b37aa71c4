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

// registered is opportunisticJob as Nomad holds it (defaults filled in,
// incarnation 7), pinned by the scheduler with its run-time priority.
func registered(t *testing.T) *api.Job {
	t.Helper()
	old := opportunisticJob()
	old.Canonicalize()
	old.CreateIndex = ptr(uint64(7))
	_, err := pin.PinWith(old, "g", &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0"}}}},
		pin.Runtime{Sharing: devicefn.SharingMPS, SharesPerGPU: 100, ClientPriority: 1})
	must.NoError(t, err)
	old.TaskGroups[0].Meta[pin.MetaSignature] = "signed"
	return old
}

// serve answers the job's read with job.
func serve(t *testing.T, job *api.Job) *api.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/job/scavenger", r.URL.Path)
		must.NoError(t, json.NewEncoder(w).Encode(job))
	}))
	t.Cleanup(srv.Close)
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)
	return client
}

// `gpushare job run` of a new version carries the pins and the run-time
// priority the scheduler wrote with them.
func TestCarryPinsCarriesPriority(t *testing.T) {
	old := registered(t)
	next := opportunisticJob()
	must.Eq(t, []string{"g"}, carryPins(serve(t, old), next))
	must.Eq(t, map[string]string{pin.EnvMPSClientPriority: "1"}, next.TaskGroups[0].Tasks[0].Env)
	must.Eq(t, old.TaskGroups[0].Meta[pin.MetaPlacement], next.TaskGroups[0].Meta[pin.MetaPlacement])
	must.Eq(t, "signed", next.TaskGroups[0].Meta[pin.MetaSignature])
	must.SliceEmpty(t, pin.Gated(next))
}

// A pin is carried only when everything the decision depended on is
// unchanged (the request digest the pin records, and the job's
// incarnation); otherwise the group stays gated and is decided again.
func TestCarryPinsOnlyWhenNothingDecidedOnChanged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		old   func(*api.Job) // what Nomad holds
		next  func(*api.Job) // the new version
		carry bool
	}{
		{name: "unchanged", carry: true},
		{name: "unchanged but for defaults Nomad fills in", next: func(j *api.Job) {
			j.TaskGroups[0].Count = ptr(1)
			j.TaskGroups[0].Tasks[0].Resources.CPU = ptr(100)
		}, carry: true},
		{name: "another class", next: func(j *api.Job) { j.TaskGroups[0].Meta[pin.MetaClass] = "production" }},
		{name: "another virtual cluster", next: func(j *api.Job) { j.Meta = map[string]string{pin.MetaVC: "research"} }},
		{name: "a declared profile", next: func(j *api.Job) { j.TaskGroups[0].Meta[pin.MetaSMUtil] = "0.5" }},
		{name: "more memory", next: func(j *api.Job) { j.TaskGroups[0].Tasks[0].Resources.MemoryMB = ptr(4096) }},
		{name: "a device constraint", next: func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "16 GiB"}}
		}},
		{name: "another incarnation of the job", old: func(j *api.Job) { j.CreateIndex = ptr(uint64(9)) }},
		// its canaries would be placed beside what runs and need shares of
		// their own: the scheduler decides (it pins an unchanged version as before)
		{name: "deployed with canaries", next: func(j *api.Job) { j.Update = &api.UpdateStrategy{Canary: ptr(1)} }},
		{name: "a group deployed with canaries", next: func(j *api.Job) { j.TaskGroups[0].Update = &api.UpdateStrategy{Canary: ptr(1), AutoPromote: ptr(true)} }},
		{name: "a batch job (no canaries)", next: func(j *api.Job) { j.Type = ptr("batch"); j.Update = &api.UpdateStrategy{Canary: ptr(1)} }, carry: true},
		{name: "a pin that records no request", old: func(j *api.Job) {
			rec, ok := pin.ParseRecord(j, "g")
			must.True(t, ok)
			rec.Request = ""
			b, err := json.Marshal(rec)
			must.NoError(t, err)
			j.TaskGroups[0].Meta[pin.MetaPlacement] = string(b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := registered(t)
			if tc.old != nil {
				tc.old(old)
			}
			next := opportunisticJob()
			if tc.next != nil {
				tc.next(next)
			}
			carried := carryPins(serve(t, old), next)
			if tc.carry {
				must.Eq(t, []string{"g"}, carried)
				must.SliceEmpty(t, pin.Gated(next))
				return
			}
			must.SliceEmpty(t, carried)
			must.Eq(t, []string{"g"}, pin.Gated(next))
			must.MapNotContainsKey(t, next.TaskGroups[0].Meta, pin.MetaPlacement)
			must.MapNotContainsKey(t, next.TaskGroups[0].Meta, pin.MetaSignature)
		})
	}
}

func ptr[T any](v T) *T { return &v }
