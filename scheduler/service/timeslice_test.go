package service

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// timesliceNomad is gpuStatsNomad whose client also reports, on the
// shares in ts, the time-slicing of the task holding them, as the plugin
// does (plugin.StatTimeslice*: ms, ms, count).
type timesliceNomad struct {
	*gpuStatsNomad
	ts map[string][3]int64 // quantum ms, suspended ms, turns, by share ID
}

func (f *timesliceNomad) DeviceStats(ctx context.Context, node string) ([]*api.DeviceGroupStats, error) {
	gs, err := f.gpuStatsNomad.DeviceStats(ctx, node)
	for _, g := range gs {
		for id, st := range g.InstanceStats {
			if v, ok := f.ts[id]; ok {
				st.Stats.Attributes["Time-slice quantum"] = &api.StatValue{IntNumeratorVal: ptr(v[0]), Unit: "ms"}
				st.Stats.Attributes["Time-slice suspended"] = &api.StatValue{IntNumeratorVal: ptr(v[1]), Unit: "ms"}
				st.Stats.Attributes["Time-slice turns"] = &api.StatValue{IntNumeratorVal: ptr(v[2])}
			}
		}
	}
	return gs, err
}

// A time-sliced allocation's quantum, suspended time and turns, as its
// shares' stats report them, are in /v1/jobs/<id> (what `gpushare job
// status` prints) and on the job's page, per allocation, and in /metrics
// per GPU (the endpoint is open: no job named); an allocation whose shares
// report none has none.
func TestTimesliceFiguresShown(t *testing.T) {
	f := &timesliceNomad{gpuStatsNomad: &gpuStatsNomad{fakeNomad: &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}, proc: map[string]int64{}},
		ts: map[string][3]int64{}}
	cfg := config.Default()
	must.NoError(t, cfg.Validate())
	clock := time.Unix(100000, 0)
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return clock })
	must.NoError(t, err)
	f.put(gated("train", 25))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["train"], "g")
	must.True(t, ok)
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "a1b2c3d4-0000-4000-8000-000000000001", Namespace: "default", JobID: "train", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		TaskStates: map[string]*api.TaskState{"t": {State: "running", StartedAt: clock}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
	must.NoError(t, s.watcher.resync(t.Context()))

	s.sampler.sampleGPUs(t.Context())
	var st JobStatus
	getJSON(t, s, "/v1/jobs/train?namespace=default", &st)
	must.SliceEmpty(t, st.Groups[0].Timeslice) // not time-sliced: nothing reported
	must.StrNotContains(t, metricsText(t, s), "gpushare_timeslice_suspended_seconds{")

	for _, sh := range rec.Shares {
		f.ts[sh] = [3]int64{2000, 12500, 7}
	}
	s.sampler.sampleGPUs(t.Context())
	getJSON(t, s, "/v1/jobs/train?namespace=default", &st)
	must.Eq(t, []AllocTimeslice{{Alloc: "a1b2c3d4-0000-4000-8000-000000000001", QuantumSeconds: 2, SuspendedSeconds: 12.5, Turns: 7}}, st.Groups[0].Timeslice)

	// /metrics names no job: the GPU's series, labelled as its others
	gpu := rec.GPUs[0]
	var labels string
	for _, line := range strings.Split(metricsText(t, s), "\n") {
		if strings.HasPrefix(line, "gpushare_gpu_shares{") && strings.Contains(line, gpu) {
			labels = line[len("gpushare_gpu_shares"):strings.LastIndex(line, " ")]
		}
	}
	must.StrContains(t, labels, `gpu="`+gpu+`"`)
	must.EqOp(t, 1.0, counterValue(t, s, "gpushare_timeslice_allocations"+labels))
	must.EqOp(t, 12.5, counterValue(t, s, "gpushare_timeslice_suspended_seconds"+labels))
	must.EqOp(t, 2.0, counterValue(t, s, "gpushare_timeslice_quantum_seconds"+labels))
	must.EqOp(t, 7.0, counterValue(t, s, "gpushare_timeslice_turns"+labels))
	must.StrNotContains(t, metricsText(t, s), "train")

	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/ui/jobs/train", nil))
	must.EqOp(t, 200, rr.Code)
	must.StrContains(t, rr.Body.String(), "a1b2c3d4</span>: 2s per turn, suspended 12.5s in all (its memory kept), 7 turns")

	// the allocation gone from the stats: its series go with it
	clear(f.ts)
	s.sampler.sampleGPUs(t.Context())
	must.StrNotContains(t, metricsText(t, s), "gpushare_timeslice_suspended_seconds{")
}

func metricsText(t *testing.T, s *Service) string {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	return rr.Body.String()
}
