package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/bytesize"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// benchNomad is a fake Nomad whose registrations succeed without changing
// anything, so that every pass of a benchmark decides the same cluster.
type benchNomad struct{ *fakeNomad }

func (benchNomad) Register(context.Context, *api.Job, uint64) (uint64, error) { return 0, nil }

// Job reads a job back, as the service does after a registration that
// returned no index: a new object each time (a new version to the
// model, as a real read is), sharing the fake's groups, which the service
// copies before it changes them. fakeNomad.Job's JSON copy of each was
// most of a pass's pin cost, which Nomad's answer does not have.
func (b benchNomad) Job(_ context.Context, _, id string) (*api.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[id]
	if !ok {
		return nil, errors.New("not found")
	}
	c := *j
	return &c, nil
}

// cluster builds n DGX-1 nodes (8 V100s each, GPU UUIDs of their own),
// each running perNode pinned jobs of 25 shares on its GPUs, and waiting
// gated jobs of 25 shares.
func benchCluster(tb testing.TB, n, perNode, waiting int) *fakeNomad {
	src, err := fixtures.FS.ReadFile(fixtures.DGX1V100)
	must.NoError(tb, err)
	f := &fakeNomad{jobs: map[string]*api.Job{}}
	for i := range n {
		st, err := fixture.Parse("dgx1", src)
		must.NoError(tb, err)
		for g := range st.Inventory.GPUs {
			st.Inventory.GPUs[g].UUID = fmt.Sprintf("GPU-%04d-%d", i, g)
		}
		grp := devicefn.Groups(&st.Inventory, 100, "mps", nil)[0]
		id := fmt.Sprintf("node-%04d", i)
		f.nodes = append(f.nodes, &api.Node{ID: id, Name: id, Status: "ready", SchedulingEligibility: "eligible",
			NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 200000}, Memory: api.NodeMemoryResources{MemoryMB: 1 << 20},
				Devices: []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpushare", Name: grp.Model, Attributes: nomadattr.ToAPI(grp.Attributes())}}}})
		for k := range perNode {
			uuid := st.Inventory.GPUs[k%8].UUID
			var shares []string
			for s := range 25 {
				shares = append(shares, devicefn.ShareID{UUID: uuid, Index: 25*(k/8) + s}.String())
			}
			jid := fmt.Sprintf("run-%04d-%02d", i, k)
			job := gated(jid, 25)
			d := &placement.Decision{Request: "default/" + jid + "/g", Policy: "gpushare",
				Placements: []placement.Placement{{AllocID: jid, Node: id, GPUs: []string{uuid}, Shares: shares}}}
			_, err := pin.Pin(job, "g", d)
			must.NoError(tb, err)
			f.put(job)
			f.allocs = append(f.allocs, &api.Allocation{ID: "alloc-" + jid, Namespace: "default", JobID: jid, TaskGroup: "g", NodeID: id,
				DesiredStatus: "run", ClientStatus: "running", CreateTime: time.Unix(900, 0).UnixNano(), ModifyIndex: 1,
				AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
					Cpu: api.AllocatedCpuResources{CpuShares: 100}, Memory: api.AllocatedMemoryResources{MemoryMB: 128},
					Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpushare", DeviceIDs: shares}},
				}}}})
		}
	}
	for w := range waiting {
		job := gated(fmt.Sprintf("wait-%05d", w), 25)
		job.SubmitTime = ptr(time.Unix(int64(w), 0).UnixNano())
		f.put(job)
	}
	return f
}

// BenchmarkPass is one decision pass (model -> step -> pins) against a
// fake Nomad at 1,000 nodes x 8 GPUs, 10,000 running allocations and
// 2,000 waiting groups, once the live snapshot is built. It reports the
// pass time with its 2,000 pins against the fake (ns/op), the time to the
// actions (decide-ms/op: reading the model, read-ms/op, then the step) and how long
// the pass holds the service's lock (lock-ms/op: to begin and to end its
// read, which runs without it; reading.go), during which the HTTP API
// waits; the longest the lock was held at once during any of the passes,
// by anyone (longest-hold-ms: the read, the pins, promote; timedMutex);
// the heap in use after the
// passes (heap-MiB: the model and the service with the fake's cluster);
// the most memory the Go runtime held from the OS during the passes,
// less the fake's cluster measured before the service read it (peak-MiB:
// what the scheduler's resident memory follows; with
// GPUSHARE_BENCH_MEMLIMIT=<size>, under that soft limit, as the
// scheduler's memory_limit sets it, reported as limit-MiB); and,
// measured in the same run, each pass followed by one that walks the
// whole snapshot and every job as before the model kept what changed and
// collect reused what it found for unchanged jobs (full-pass-ms/op,
// full-lock-ms/op; x-faster is their pass time over the kept one's).
// Every pass above starts on a collected heap; the unforced passes
// (unforced-decide-ms/op, unforced-pass-ms/op) run one after another
// afterwards, as the scheduler runs them, paying for the collections
// their garbage calls for. Last, a relist of the cluster as it is
// (relist-ms; relist-longest-hold-ms, the longest it held the lock).
func BenchmarkPass(b *testing.B) {
	benchPass(b, benchCluster(b, 1000, 10, 2000))
}

// BenchmarkPassAt is BenchmarkPass at 1,000, 4,000 and 10,000 nodes, each
// with 10 running allocations per node and 2 waiting groups per node
// (issue 30's sizes: 10,000 nodes, 100,000 allocations, 20,000 groups).
// Past 1,000 nodes it runs only with GPUSHARE_BENCH_LARGE=1 (make bench
// sets it): the 10,000-node cluster takes minutes and gigabytes to build,
// which make test's one run of every benchmark does not need.
func BenchmarkPassAt(b *testing.B) {
	for _, n := range []int{1000, 4000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			if n > 1000 && os.Getenv("GPUSHARE_BENCH_LARGE") != "1" {
				b.Skip("set GPUSHARE_BENCH_LARGE=1 (make bench does)")
			}
			benchPass(b, benchCluster(b, n, 10, 2*n))
		})
	}
}

// BenchmarkPassSteady is BenchmarkPass on a cluster that does not change:
// every waiting group asks for a whole node (8 GPUs), which no node has
// free, so it keeps waiting, no pin is sent, and nothing in the model
// changes between passes. Each pass then looks again at no job
// (collectCache): what is left of the read is the snapshot's holds and
// the waiting groups' replay (back-off, refusals, queue place).
func BenchmarkPassSteady(b *testing.B) {
	f := benchCluster(b, 1000, 10, 2000)
	for id, j := range f.jobs {
		if strings.HasPrefix(id, "wait-") {
			j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptr(uint64(800))
		}
	}
	benchPass(b, f)
}

// BenchmarkPassRules is BenchmarkPass with Nomad's own rules to check:
// the nodes alternate between two datacenters and report a docker driver
// and their kernel, and every waiting job asks for the second datacenter,
// docker and Linux, one in ten with a node constraint of its own (200
// distinct rule sets): each group is placed among 500 nodes.
func BenchmarkPassRules(b *testing.B) {
	f := benchCluster(b, 1000, 10, 2000)
	for i, n := range f.nodes {
		n.Datacenter = []string{"dc1", "dc2"}[i%2]
		n.Attributes = map[string]string{"kernel.name": "linux"}
		n.Meta = map[string]string{"rack": fmt.Sprintf("r%d", i%20)}
		n.Drivers = map[string]*api.DriverInfo{"docker": {Detected: true, Healthy: true}}
	}
	w := 0
	for id, j := range f.jobs {
		if !strings.HasPrefix(id, "wait-") {
			continue
		}
		j.Datacenters = []string{"dc2"}
		j.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}}
		if w%10 == 0 {
			j.Constraints = append(j.Constraints, &api.Constraint{LTarget: "${node.unique.name}", Operand: "!=", RTarget: id})
		}
		j.TaskGroups[0].Tasks[0].Driver = "docker"
		w++
	}
	benchPass(b, f)
}

func benchPass(b *testing.B, f *fakeNomad) {
	fake := heapMiB() // the fake's cluster, before the service reads it
	s, err := newService(config.Default(), hclog.NewNullLogger(), benchNomad{f}, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(b, err)
	must.NoError(b, s.watcher.resync(b.Context()))
	var pins int
	s.loop.onStep = func(as []decide.Action) {
		pins = 0
		for _, a := range as {
			if a.Kind == decide.Pin {
				pins++
			}
		}
	}
	s.loop.reconcile(b.Context()) // the first pass builds the live snapshot
	// each pass is followed by one with the snapshot walked whole, as
	// before the model kept what changed (model.State.Rebuild), outside
	// the timer: the two are compared in the same run, under the same load.
	// Each starts on a collected heap, so that neither pays for the
	// other's garbage (the full walk makes much more)
	var kept, full passTimes
	var peak peakMemory
	limitMiB := 0.0
	if v := os.Getenv("GPUSHARE_BENCH_MEMLIMIT"); v != "" {
		// the scheduler's memory_limit (internal/memlimit), on top of the
		// fake's cluster, which shares this process's heap
		limit, err := bytesize.Parse(v)
		must.NoError(b, err, must.Sprint("GPUSHARE_BENCH_MEMLIMIT is a size, such as 2GiB"))
		before := debug.SetMemoryLimit(int64(limit) + int64(fake*(1<<20)))
		defer debug.SetMemoryLimit(before)
		limitMiB = float64(limit) / (1 << 20) // reported after ResetTimer, which drops what was reported before it
	}
	runtime.GC()
	b.ResetTimer()
	for range b.N {
		stop := peak.watch()
		kept.add(s, "kept")
		stop()
		b.StopTimer()
		setRebuild(s, true)
		runtime.GC()
		full.add(s, "full")
		setRebuild(s, false)
		runtime.GC()
		b.StartTimer()
	}
	b.StopTimer()
	// as the scheduler runs them: one pass after another, each paying for
	// the collections the garbage of those before it calls for, which a
	// pass started on a collected heap does not (the kept passes above)
	var unforced passTimes
	for range b.N {
		unforced.add(s, "unforced")
	}
	// a relist of the cluster as it is (every resync_interval): what it
	// reads again and merges, and the longest it holds the lock at once
	s.mu.longest()
	relisted := time.Now()
	pprof.Do(b.Context(), pprof.Labels("kind", "relist"), func(ctx context.Context) { must.NoError(b, s.watcher.resync(ctx)) })
	b.ReportMetric(ms(time.Since(relisted), 1), "relist-ms")
	b.ReportMetric(ms(s.mu.longest(), 1), "relist-longest-hold-ms")
	b.ReportMetric(unforced.decideMS(b.N), "unforced-decide-ms/op")
	b.ReportMetric(unforced.passMS(b.N), "unforced-pass-ms/op")
	b.ReportMetric(kept.lockMS(b.N), "lock-ms/op")
	b.ReportMetric(ms(kept.longest, 1), "longest-hold-ms")
	b.ReportMetric(kept.decideMS(b.N), "decide-ms/op")
	b.ReportMetric(kept.readMS(b.N), "read-ms/op")
	b.ReportMetric(float64(pins), "pins/op")
	if limitMiB > 0 {
		b.ReportMetric(limitMiB, "limit-MiB")
	}
	b.ReportMetric(peak.mib()-fake, "peak-MiB")
	b.ReportMetric(heapMiB(), "heap-MiB")
	runtime.KeepAlive(s) // measured with the service and its model
	b.ReportMetric(serviceHeapMiB(f), "service-heap-MiB")
	runtime.KeepAlive(s)
	b.ReportMetric(full.lockMS(b.N), "full-lock-ms/op")
	b.ReportMetric(full.passMS(b.N), "full-pass-ms/op")
	b.ReportMetric(float64(full.pass)/float64(max(kept.pass, 1)), "x-faster")
}

func setRebuild(s *Service, on bool) {
	s.mu.Lock()
	s.state.Rebuild = on
	s.loop.collectCache().full = on // collect looks at every job, as before it reused what did not change
	s.mu.Unlock()
}

// passTimes sums what passes took.
type passTimes struct{ pass, held, read, decided, longest time.Duration }

// add runs one pass, labelled kind in a CPU profile (go tool pprof
// -tagfocus kind=kept).
func (p *passTimes) add(s *Service, kind string) {
	s.mu.longest() // what came before the pass
	start := time.Now()
	pprof.Do(context.Background(), pprof.Labels("kind", kind), func(ctx context.Context) { s.loop.reconcile(ctx) })
	p.pass += time.Since(start)
	p.longest = max(p.longest, s.loop.timing.longestHold)
	p.held += s.loop.timing.lockHold
	p.read += s.loop.timing.read
	p.decided += s.loop.timing.lockHold + s.loop.timing.step
}

func (p passTimes) lockMS(n int) float64   { return ms(p.held, n) }
func (p passTimes) readMS(n int) float64   { return ms(p.read, n) }
func (p passTimes) decideMS(n int) float64 { return ms(p.decided, n) }
func (p passTimes) passMS(n int) float64   { return ms(p.pass, n) }

func ms(d time.Duration, n int) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }

// heapMiB is the heap in use after a collection: the model, its snapshot
// and what the service keeps, with the fake Nomad's cluster.
func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// serviceHeapMiB is heapMiB without the fake Nomad's cluster: the fake's
// nodes, jobs and allocations are dropped first (the model holds copies
// of its nodes and jobs, and the allocations it listed, which stay
// counted), so what is left is what the service and its model keep. It
// ends the fake's use: call it last. With GPUSHARE_BENCH_HEAPPROFILE set
// it also writes the heap's profile to that file, for pprof.
func serviceHeapMiB(f *fakeNomad) float64 {
	f.mu.Lock()
	f.nodes, f.jobs, f.allocs, f.nodeVers = nil, nil, nil, nil
	f.mu.Unlock()
	mib := heapMiB()
	if path := os.Getenv("GPUSHARE_BENCH_HEAPPROFILE"); path != "" {
		if out, err := os.Create(path); err == nil {
			_ = pprof.WriteHeapProfile(out)
			_ = out.Close()
		}
	}
	return mib
}

// peakMemory is the most memory the Go runtime held from the OS (mapped
// and not released: what the process's resident memory follows) while
// it watched.
type peakMemory struct{ bytes uint64 }

// watch samples the runtime's memory every millisecond until the
// returned stop is called.
func (p *peakMemory) watch() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	samples := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	read := func() {
		rtmetrics.Read(samples)
		p.bytes = max(p.bytes, samples[0].Value.Uint64()-samples[1].Value.Uint64())
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-done:
				read()
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (p *peakMemory) mib() float64 { return float64(p.bytes) / (1 << 20) }
