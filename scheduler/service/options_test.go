package service

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// withConfig builds a service on f with the default configuration changed
// by edit, and runs one pass.
func withConfig(t *testing.T, f *fakeNomad, edit func(*config.Config)) *Service {
	t.Helper()
	cfg := config.Default()
	if edit != nil {
		edit(cfg)
	}
	must.NoError(t, cfg.Validate())
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(10000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	return s
}

// halves runs a production job of the given SM use on the first half of
// every GPU of the DGX-1.
func halves(t *testing.T, f *fakeNomad, sm string) {
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	for g := range node.GPUs {
		id := "half-" + string(rune('0'+g))
		job := gated(id, 50)
		job.TaskGroups[0].Constraints = nil
		job.Meta[pin.MetaClass], job.Meta[pin.MetaSMUtil], job.Meta[pin.MetaMemBW] = "production", sm, "0.5"
		f.put(job)
		var shares []string
		for k := range 50 {
			shares = append(shares, devicefn.ShareID{UUID: node.GPUs[g].UUID, Index: k}.String())
		}
		f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: node.ID,
			DesiredStatus: "run", ClientStatus: "running", ModifyIndex: 1,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}}}}}})
	}
}

// Every option that shapes decisions changes one (the options of other
// parts have their own tests: namespaces, reservations, the leader lock).
func TestEveryOptionChangesADecision(t *testing.T) {
	pinned := func(f *fakeNomad, id string) *pin.Record {
		rec, ok := pin.ParseRecord(f.jobs[id], "g")
		if !ok || len(pin.Gated(f.jobs[id])) > 0 {
			return nil
		}
		return rec
	}

	t.Run("production_max_slowdown", func(t *testing.T) {
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			halves(t, f, "0.9")
			j := gated("new", 50)
			j.Meta[pin.MetaClass], j.Meta[pin.MetaSMUtil], j.Meta[pin.MetaMemBW] = "production", "0.9", "0.5"
			f.put(j)
			return f
		}
		f := scenario()
		s := withConfig(t, f, nil)
		must.Nil(t, pinned(f, "new"))
		must.StrContains(t, s.loop.answers.pending[key("new")], "interference bound")
		f = scenario()
		withConfig(t, f, func(c *config.Config) { c.ProductionMaxSlowdown = 0.9 })
		must.NotNil(t, pinned(f, "new"))
	})

	t.Run("profile", func(t *testing.T) {
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			halves(t, f, "0.3")
			j := gated("new", 50)
			j.Meta[pin.MetaClass], j.Meta[pin.MetaProfile] = "production", "tiny-inference"
			f.put(j)
			return f
		}
		f := scenario()
		s := withConfig(t, f, nil)
		must.Nil(t, pinned(f, "new"))
		must.StrContains(t, s.loop.answers.pending[key("new")], "tiny-inference")
		f = scenario()
		withConfig(t, f, func(c *config.Config) {
			c.Profiles = []config.Profile{{Name: "tiny-inference", SMUtil: 0.05, MemBW: 0.05}}
			// room for the prediction's uncertainty (the model's error, 0.19)
			c.ProductionMaxSlowdown = 0.25
		})
		must.NotNil(t, pinned(f, "new"))
	})

	t.Run("adopt_ungated", func(t *testing.T) {
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			j := gated("plain", 25)
			j.TaskGroups[0].Constraints = nil
			f.put(j)
			f.runningOn("plain", "alloc-spans", spanning(t, f, 25)) // Reserve refuses it
			return f
		}
		f := scenario()
		withConfig(t, f, nil)
		must.NotNil(t, pinned(f, "plain"))
		f = scenario()
		withConfig(t, f, func(c *config.Config) { c.AdoptUngated = ptr(false) })
		_, ok := pin.ParseRecord(f.jobs["plain"], "g")
		must.False(t, ok)
	})

	t.Run("idle_gpu_first", func(t *testing.T) {
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			f.put(gated("a", 25))
			f.put(gated("b", 25))
			return f
		}
		f := scenario()
		withConfig(t, f, nil)
		must.Eq(t, pinned(f, "a").GPUs, pinned(f, "b").GPUs) // packed
		f = scenario()
		withConfig(t, f, func(c *config.Config) { c.IdleGPUFirst = true })
		must.NotEq(t, pinned(f, "a").GPUs, pinned(f, "b").GPUs)
	})

	t.Run("default_expected_runtime", func(t *testing.T) {
		// one free GPU; "declared" waited 30 minutes of a declared 2 hours
		// (ratio 1.25); "undeclared" waited 20 minutes
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			running(t, f, "busy", []int{0, 1, 2, 3, 4, 5, 6}, 0, "10h")
			d := waiting("declared", 100, "2h")
			d.SubmitTime = ptr(time.Unix(10000-30*60, 0).UnixNano())
			f.put(d)
			u := gated("undeclared", 100)
			u.SubmitTime = ptr(time.Unix(10000-20*60, 0).UnixNano())
			f.put(u)
			return f
		}
		f := scenario() // default 1h: (20m + 1h) / 1h = 1.33 goes first
		withConfig(t, f, nil)
		must.NotNil(t, pinned(f, "undeclared"))
		must.Nil(t, pinned(f, "declared"))
		f = scenario() // 10h: (20m + 10h) / 10h = 1.03 goes after 1.25
		withConfig(t, f, func(c *config.Config) { c.DefaultExpectedRuntime = "10h" })
		must.NotNil(t, pinned(f, "declared"))
		must.Nil(t, pinned(f, "undeclared"))
	})

	t.Run("policy", func(t *testing.T) {
		// GPU 5 is half used: gpushare packs the fraction there (keeping
		// whole GPUs free), first-fit takes the first GPU with room
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			running(t, f, "half", []int{5}, 0, "1h")
			f.allocs[0].AllocatedResources.Tasks["t"].Devices[0].DeviceIDs = f.allocs[0].AllocatedResources.Tasks["t"].Devices[0].DeviceIDs[:50]
			f.put(gated("frac", 25))
			return f
		}
		f := scenario()
		withConfig(t, f, nil)
		packed := pinned(f, "frac").GPUs
		f = scenario()
		withConfig(t, f, func(c *config.Config) { c.Policy = "first-fit" })
		must.NotEq(t, packed, pinned(f, "frac").GPUs)
	})

	t.Run("virtual_cluster", func(t *testing.T) {
		// one free GPU; "tenant" names VC research and was submitted after
		// "early": guaranteed groups go first only when the VC exists
		scenario := func() *fakeNomad {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			running(t, f, "busy", []int{0, 1, 2, 3, 4, 5, 6}, 0, "10h")
			e := gated("early", 100)
			e.SubmitTime = ptr(time.Unix(9000, 0).UnixNano())
			f.put(e)
			v := gated("tenant", 100)
			v.SubmitTime = ptr(time.Unix(9500, 0).UnixNano())
			v.Meta[pin.MetaVC] = "research"
			f.put(v)
			return f
		}
		f := scenario()
		withConfig(t, f, nil)
		must.NotNil(t, pinned(f, "early"))
		must.Nil(t, pinned(f, "tenant"))
		f = scenario()
		withConfig(t, f, func(c *config.Config) {
			c.VCs = []config.VirtualCluster{{Name: "research", Cells: []config.Cell{{GPUs: 1, Count: 1}}}}
		})
		must.NotNil(t, pinned(f, "tenant"))
		must.Nil(t, pinned(f, "early"))
	})
}

// Guarantees larger than the cluster are said at start.
func TestWarnsOfGuaranteesLargerThanTheCluster(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	cfg := config.Default()
	cfg.VCs = []config.VirtualCluster{{Name: "big", Cells: []config.Cell{{GPUs: 64, Count: 100}}}}
	var logs strings.Builder
	s, err := newService(cfg, hclog.New(&hclog.LoggerOptions{Output: &logs}), f, time.Now)
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.StrContains(t, logs.String(), "guarantee more GPUs than the cluster has")
	must.StrContains(t, logs.String(), "guaranteed_gpus=6400 cluster_gpus=8")
}
