package service

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// gpuStatsNomad is a fake Nomad whose client reports, on every share of
// every GPU of its node, the GPU's counters, and on the shares a task
// holds, its processes' SM utilisation.
type gpuStatsNomad struct {
	*fakeNomad
	mu    sync.Mutex
	util  int64
	proc  map[string]int64 // by share ID
	reads int
}

func (f *gpuStatsNomad) DeviceStats(_ context.Context, node string) ([]*api.DeviceGroupStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	g := &api.DeviceGroupStats{Vendor: "nvidia", Type: "gpushare", Name: "Tesla V100-SXM2-16GB", InstanceStats: map[string]*api.DeviceStats{}}
	for _, n := range f.nodes {
		if n.ID != node {
			continue
		}
		for _, uuid := range nodeGPUs(n) {
			for _, id := range devicefn.ShareIDs(uuid, 100) {
				a := map[string]*api.StatValue{
					"GPU utilization":    {IntNumeratorVal: ptr(f.util), IntDenominatorVal: ptr(int64(100)), Unit: "%"},
					"Memory utilization": {IntNumeratorVal: ptr(int64(20)), IntDenominatorVal: ptr(int64(100)), Unit: "%"},
					"Memory used":        {IntNumeratorVal: ptr(int64(4000)), IntDenominatorVal: ptr(int64(16384)), Unit: "MiB"},
					"Power usage":        {IntNumeratorVal: ptr(int64(150)), Unit: "W"},
					"Temperature":        {IntNumeratorVal: ptr(int64(45)), Unit: "C"},
				}
				if v, ok := f.proc[id]; ok {
					a[statProcessSM] = &api.StatValue{IntNumeratorVal: ptr(v), IntDenominatorVal: ptr(int64(100)), Unit: "%"}
				}
				g.InstanceStats[id] = &api.DeviceStats{Stats: &api.StatObject{Attributes: a}}
			}
		}
	}
	return []*api.DeviceGroupStats{g}, nil
}

// nodeGPUs lists a node's GPU UUIDs, from its map.
func nodeGPUs(n *api.Node) []string {
	var out []string
	m := gpumap.Build([]*api.Node{n}, nil)
	for _, nd := range m.Nodes {
		for _, g := range nd.GPUs {
			out = append(out, g.UUID)
		}
	}
	return out
}

// The scheduler reads each GPU's counters from its shares' device stats
// every observe interval: /v1/gpus shows the latest per GPU (utilisation,
// memory used and total, power, temperature), /v1/history each GPU's
// utilisation and each job's (its processes' SM utilisation) at each
// sample, on the injected clock.
func TestGPUStatsAndHistory(t *testing.T) {
	f := &gpuStatsNomad{fakeNomad: &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}, proc: map[string]int64{}}
	cfg := config.Default()
	must.NoError(t, cfg.Validate())
	clock := time.Unix(100000, 0)
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return clock })
	must.NoError(t, err)
	j := gated("train", 25)
	f.put(j)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["train"], "g")
	must.True(t, ok)
	f.index++
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-train", Namespace: "default", JobID: "train", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", ModifyIndex: f.index, CreateIndex: f.index,
		TaskStates: map[string]*api.TaskState{"t": {State: "running", StartedAt: clock}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: rec.Shares}}}}}})
	must.NoError(t, s.watcher.resync(t.Context()))

	f.util = 80
	for _, sh := range rec.Shares {
		f.proc[sh] = 60
	}
	s.sampler.sampleGPUs(t.Context())
	must.EqOp(t, 1, f.reads) // one read per node
	clock = clock.Add(30 * time.Second)
	f.util = 40
	s.sampler.sampleGPUs(t.Context())

	var gpus GPUs
	getJSON(t, s, "/v1/gpus", &gpus)
	gpu := rec.GPUs[0]
	found := false
	for _, n := range gpus.Nodes {
		for _, g := range n.GPUs {
			must.NotNil(t, g.Stats, must.Sprintf("GPU %s has stats", g.UUID))
			must.EqOp(t, 4000, g.Stats.MemoryUsedMiB)
			must.EqOp(t, 16384, g.Stats.MemoryTotalMiB)
			must.EqOp(t, 150.0, g.Stats.PowerW)
			must.EqOp(t, 45.0, g.Stats.TemperatureC)
			must.EqOp(t, 40.0, g.Stats.UtilizationPct) // the latest
			must.True(t, g.Stats.At.Equal(clock))
			found = found || g.UUID == gpu
		}
	}
	must.True(t, found)

	var h History
	getJSON(t, s, "/v1/history", &h)
	must.EqOp(t, 3600.0, h.SpanSeconds)
	must.EqOp(t, 30.0, h.IntervalSeconds)
	must.Len(t, 8, h.GPUs)
	for _, g := range h.GPUs {
		must.Len(t, 2, g.Utilization)
		must.EqOp(t, 80.0, g.Utilization[0].Value)
		must.EqOp(t, 40.0, g.Utilization[1].Value)
	}
	must.Len(t, 1, h.Jobs)
	must.EqOp(t, "train", h.Jobs[0].Job)
	must.Len(t, 2, h.Jobs[0].Utilization)
	must.EqOp(t, 60.0, h.Jobs[0].Utilization[1].Value) // its processes' SM utilisation

	// without its processes' stats, the job is its part of its GPU's
	clear(f.proc)
	clock = clock.Add(30 * time.Second)
	s.sampler.sampleGPUs(t.Context())
	getJSON(t, s, "/v1/history", &h)
	must.EqOp(t, 10.0, h.Jobs[0].Utilization[2].Value) // 40% × 25/100 shares

	// the page shows them: each GPU's stats and sparkline, the job's
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/ui", nil))
	must.EqOp(t, 200, rr.Code)
	body := rr.Body.String()
	must.StrContains(t, body, "40% busy · 3.9 GiB of 16.0 GiB memory used · 150 W · 45 °C")
	must.EqOp(t, 8+1, strings.Count(body, `<svg class="spark"`)) // 8 GPUs, 1 job
}

// get reads a JSON endpoint of the service.
func getJSON(t *testing.T, s *Service, path string, v any) {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", path, nil))
	must.EqOp(t, 200, rr.Code, must.Sprint(rr.Body.String()))
	must.NoError(t, json.Unmarshal(rr.Body.Bytes(), v))
}
