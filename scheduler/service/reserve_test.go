package service

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// running returns a job whose group runs as one allocation on the given
// GPUs of the node (all their shares), created `ago` before the test
// clock's now (time.Unix(1000, 0)) and declaring its run time.
func running(t *testing.T, f *fakeNomad, id string, gpus []int, ago time.Duration, expected string) {
	t.Helper()
	job := gated(id, uint64(100*len(gpus)))
	job.TaskGroups[0].Constraints = nil // placed already
	job.Meta[pin.MetaExpected] = expected
	f.put(job)
	node, err := model.NodeOf(f.nodes[0])
	must.NoError(t, err)
	var shares []string
	for _, g := range gpus {
		for k := range 100 {
			shares = append(shares, devicefn.ShareID{UUID: node.GPUs[g].UUID, Index: k}.String())
		}
	}
	f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + id, Namespace: "default", JobID: id, TaskGroup: "g", NodeID: node.ID,
		DesiredStatus: "run", ClientStatus: "running", CreateTime: time.Unix(1000, 0).Add(-ago).UnixNano(),
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu: api.AllocatedCpuResources{CpuShares: 100}, Memory: api.AllocatedMemoryResources{MemoryMB: 128},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}},
		}}}})
}

func waiting(id string, shares uint64, expected string) *api.Job {
	j := gated(id, shares)
	j.Meta[pin.MetaExpected] = expected
	return j
}

// busyDGX1 is a DGX-1 running a 3-GPU job that ends in 5 minutes and a
// 4-GPU job that ends in 2 hours (one GPU free), with an 8-GPU job that
// expects 3 hours and a 5-hour single-GPU job waiting behind it.
func busyDGX1(t *testing.T) *fakeNomad {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "a", []int{0, 1, 2}, 5*time.Minute, "10m")
	running(t, f, "b", []int{3, 4, 5, 6}, 0, "2h")
	f.put(waiting("big", 800, "3h"))
	f.put(waiting("long", 100, "5h"))
	return f
}

// The DGX-1 runs a 3-GPU job ending in 5 minutes and a 4-GPU job ending
// in 2 hours; one GPU is free. An 8-GPU job that expects 3 hours cannot
// start, and the node frees within its run time, so it holds the node:
// a 5-hour single-GPU job behind it may not take the free GPU, a
// 30-minute one may (it ends before the 8-GPU job could start).
func TestReservationWithBackfilling(t *testing.T) {
	f := busyDGX1(t)
	f.put(waiting("short", 100, "30m"))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())

	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["big"]))
	must.StrContains(t, s.loop.answers.pending[key("big")], "holds 1 node(s) expected to free within 2h0m0s")
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["long"]))
	must.StrContains(t, s.loop.answers.pending[key("long")], "1 node(s) are held for default/big/g")
	must.SliceEmpty(t, pin.Gated(f.jobs["short"]))
	rec, ok := pin.ParseRecord(f.jobs["short"], "g")
	must.True(t, ok)
	must.Eq(t, []string{"node-1"}, rec.Nodes)
}

// An operator can turn reservations off: the 5-hour job takes the free GPU.
func TestReservationsOff(t *testing.T) {
	f := busyDGX1(t)
	cfg := config.Default()
	cfg.Reservations = ptr(false)
	s, err := newService(cfg, hclog.NewNullLogger(), f, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["big"]))
	must.StrNotContains(t, s.loop.answers.pending[key("big")], "holds")
	must.SliceEmpty(t, pin.Gated(f.jobs["long"]))
}

// No reservation when the GPUs would stay idle longer than the waiting job
// then uses them: a 1-hour 8-GPU job does not hold a node that frees in 2
// hours, and the 5-hour job takes the free GPU.
func TestNoReservationLongerThanTheJob(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	running(t, f, "b", []int{0, 1, 2, 3, 4, 5, 6}, 0, "2h")
	f.put(waiting("big", 800, "1h"))
	f.put(waiting("long", 100, "5h"))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.Eq(t, []string{"g"}, pin.Gated(f.jobs["big"]))
	must.StrNotContains(t, s.loop.answers.pending[key("big")], "holds")
	must.SliceEmpty(t, pin.Gated(f.jobs["long"]))
}

// key names group g of a job in the default namespace.
func key(job string) decide.Key { return decide.Key{Namespace: "default", Job: job, Group: "g"} }
