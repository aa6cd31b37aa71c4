package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The scheduler's timeslice.max_per_gpu reaches the placement core: on a
// DGX-1 (8 GPUs), 17 time-sliced groups of 10 shares fit 2 per GPU under
// max_per_gpu = 2 (16 pinned, one waits), and all under the default (4).
func TestTimesliceMaxPerGPUIsTheConfigs(t *testing.T) {
	for _, tc := range []struct {
		max, pinned int
	}{{2, 16}, {0, 17}} {
		cfg := config.Default()
		if tc.max > 0 {
			cfg.Timeslice.MaxPerGPU = tc.max
		}
		f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
		for i := range 17 {
			j := gated(fmt.Sprintf("ts-%02d", i), 10)
			j.TaskGroups[0].Meta[pin.MetaTimeslice] = "true"
			f.put(j)
		}
		s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
		must.NoError(t, err)
		must.NoError(t, s.watcher.resync(t.Context()))
		must.NoError(t, s.records.loadSecret(t.Context(), true))
		must.NoError(t, s.records.loadState(t.Context(), true))
		s.loop.reconcile(t.Context())
		pinned := 0
		for id := range f.jobs {
			if _, ok := pin.ParseRecord(f.jobs[id], "g"); ok {
				pinned++
			}
		}
		must.Eq(t, tc.pinned, pinned, must.Sprintf("max_per_gpu %d", tc.max))
	}
}
