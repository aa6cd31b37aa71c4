package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestLoad is a benchmark more than a timed test: N gated jobs (mixed
// requests, some groups of count 2, some batch jobs that end after a few
// seconds, the rest services) registered in a burst through the Nomad API
// on a cluster of nine fixture clients (64 GPUs of five server types) with
// the real plugin and one `gpushare scheduler`. It waits until every job
// that fits runs (or ran), checks from Nomad's allocations that no job is
// lost, no share is given twice and every allocation's shares are a
// fraction of one GPU or whole GPUs, then purges the batch jobs and checks
// that the scheduler's records shrink with them. The figures are logged in
// one block of lines starting with LOAD.
//
// GPUSHARE_BURST=<N> sets the number of jobs; unset, it runs 100 jobs (a
// few minutes on two cores), and GPUSHARE_BURST=0 skips it. (The flow of
// finite jobs over time is TestChurn's, make soak's.)
func TestLoad(t *testing.T) {
	n := 100
	if v := os.Getenv("GPUSHARE_BURST"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		must.NoError(t, err, must.Sprint("GPUSHARE_BURST is the number of jobs"))
	}
	if n <= 0 {
		t.Skip("GPUSHARE_BURST=0: no burst run")
	}
	e := newLoadEnv(t)
	s := e.startSchedulerLevel("s1", "info", "")
	l := &loadRun{e: e, s: s, jobs: loadJobs(n, 42)}
	l.cpu0, _ = procCPU(s.proc.Pid())
	if pid := l.serverPid(); pid > 0 {
		l.serverCPU0, _ = procCPU(pid)
	}
	l.pins0 = l.pinsTotal()

	l.burst()
	l.settle(max(10*time.Minute, time.Duration(n)*1500*time.Millisecond))
	l.check()
	l.churn()
	l.report()
}

// loadClients are the load cluster: 2 HGX H100, 2 DGX A100, 2 DGX-1
// V100, a DGX-1 seen through PCIe and 2 four-GPU PCIe servers.
var loadClients = []struct{ name, fixture string }{
	{"h100-1", fixtures.HGXH100}, {"h100-2", fixtures.HGXH100},
	{"a100-1", fixtures.DGXA100}, {"a100-2", fixtures.DGXA100},
	{"v100-1", fixtures.DGX1V100}, {"v100-2", fixtures.DGX1V100},
	{"v100pcie-1", fixtures.DGX1PCIe},
	{"pcie-1", fixtures.PCIe4GPU}, {"pcie-2", fixtures.PCIe4GPU},
}

// fixtureUUID matches the per-file prefix of a shipped fixture's GPU UUIDs
// (GPU-h1000000-...).
var fixtureUUID = regexp.MustCompile(`GPU-([a-z0-9])([a-z0-9])000000-`)

// newLoadEnv starts the load cluster: each client serves a copy of its
// fixture whose GPU UUIDs carry the client's index, so no two clients
// share a UUID; nodes claim far more CPU and memory than the jobs use.
func newLoadEnv(t *testing.T) *env {
	t.Helper()
	fx := t.TempDir()
	var clients []devcluster.Client
	paths := map[string]string{}
	for i, c := range loadClients {
		b, err := fixtures.FS.ReadFile(c.fixture)
		must.NoError(t, err)
		src := fixtureUUID.ReplaceAllString(string(b), fmt.Sprintf("GPU-${1}${2}0000%02d-", i))
		p := filepath.Join(fx, c.name+".hcl")
		must.NoError(t, os.WriteFile(p, []byte(src), 0o644))
		paths[c.name] = p
		clients = append(clients, devcluster.Client{
			Name: c.name, Fixture: p, Meta: map[string]string{"rack": fmt.Sprintf("r%d", i%3)},
			CPUTotalCompute: 200_000, MemoryTotalMB: 256 * 1024,
		})
	}
	return envOn(t, startClusterWith(t, devcluster.Options{Clients: clients, Persistent: true}), paths, "gpushare-load-")
}

// loadJob is one job of the load and what was seen of it.
type loadJob struct {
	id            string
	shares, count int
	batch         bool
	sleep         int // seconds a batch job runs
	registered    time.Time
	// latency is registration -> the last of its allocations started;
	// zero until then
	latency time.Duration
}

// loadJobs draws n jobs: 10/25/50/100/200/400 shares (small ones more
// often), 15% of the fractional groups of count 2, 30% batch jobs of 2-6s.
func loadJobs(n int, seed uint64) []*loadJob {
	r := rand.New(rand.NewPCG(seed, 1))
	sizes := []struct{ shares, weight int }{{10, 30}, {25, 25}, {50, 15}, {100, 12}, {200, 10}, {400, 8}}
	jobs := make([]*loadJob, n)
	for i := range jobs {
		w := r.IntN(100)
		j := &loadJob{id: fmt.Sprintf("load-%04d", i), count: 1}
		for _, s := range sizes {
			if w < s.weight {
				j.shares = s.shares
				break
			}
			w -= s.weight
		}
		if j.shares < 100 && r.IntN(100) < 15 {
			j.count = 2
		}
		if r.IntN(100) < 30 {
			j.batch, j.sleep = true, 2+r.IntN(5)
		}
		jobs[i] = j
	}
	return jobs
}

// apiJob is the job as `gpushare job run` registers it: gated, 20 MHz and
// 32 MiB a task, restarts off.
func (j *loadJob) apiJob() *api.Job {
	var job *api.Job
	cmd := "exec sleep 3600"
	if j.batch {
		job = api.NewBatchJob(j.id, j.id, "global", 50)
		cmd = fmt.Sprintf("exec sleep %d", j.sleep)
	} else {
		job = api.NewServiceJob(j.id, j.id, "global", 50)
		job.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second), HealthyDeadline: ptr(time.Minute)}
	}
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("g", j.count)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.EphemeralDisk = &api.EphemeralDisk{SizeMB: ptr(10)}
	task := api.NewTask("work", "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", cmd})
	task.Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(32), Devices: []*api.RequestedDevice{{Name: pin.DeviceName, Count: ptr(uint64(j.shares))}}})
	task.LogConfig = &api.LogConfig{MaxFiles: ptr(1), MaxFileSizeMB: ptr(1)}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	pin.AddGate(job)
	return job
}

func ptr[T any](v T) *T { return &v }

// loadRun is the state of one load run.
type loadRun struct {
	e    *env
	s    *scheduler
	jobs []*loadJob

	cpu0  time.Duration
	pins0 float64
	// the sampler's: the pin counter, when it last moved, the most pins
	// in a 5s window per second
	mu           sync.Mutex
	pins1        float64
	lastPin      time.Time
	peakPins     float64
	stopSampling func()
	start        time.Time // burst start
	registeredIn time.Duration
	settledIn    time.Duration

	// after settle
	done, waiting           []*loadJob
	failed                  []string
	live, withShares        int
	twice, invalid          []string
	pinsItems, reasonsItems int
	groups                  int
	gpus, shares            int
	behindHold, unconnected int
	freeShares, idleGPUs    int
	serverCPU0, serverCPU   time.Duration
	serverHWM               int
	evalsAtRest             string
	afterPurge              string
}

// burst registers every job from four goroutines, as fast as Nomad takes
// them.
func (l *loadRun) burst() {
	t := l.e.t
	next := make(chan *loadJob)
	var wg sync.WaitGroup
	errs := make(chan error, len(l.jobs))
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				job := j.apiJob()
				j.registered = time.Now()
				if _, _, err := l.e.nomad.Jobs().Register(job, nil); err != nil {
					errs <- fmt.Errorf("registering %s: %w", j.id, err)
				}
			}
		}()
	}
	l.start = time.Now()
	l.sample()
	for _, j := range l.jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	l.registeredIn = time.Since(l.start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("registered %d jobs in %s", len(l.jobs), l.registeredIn.Round(time.Millisecond))
}

// settle polls Nomad's allocations and the scheduler until every job has
// run (batch: completed; service: all allocations running) or waits at
// the gate with nothing in flight, and the pin counter stood still.
func (l *loadRun) settle(timeout time.Duration) {
	t := l.e.t
	deadline := time.Now().Add(timeout)
	defer l.stopSampling()
	stable := 0
	lastLog := time.Now()
	for {
		now := time.Now()
		l.mu.Lock()
		pins := l.pins1
		l.mu.Unlock()
		st, err := l.observe()
		l.mu.Lock()
		quiet := now.Sub(l.lastPin) > 5*time.Second
		l.mu.Unlock()
		if err == nil {
			// settled is a fact of the scheduler, not of time: its last
			// finished pass decided on everything Nomad had done when the
			// allocations were read (on a loaded machine it may lag)
			var h service.Health
			err = getJSON(l.s.http+"/v1/health", &h)
			st.decided = err == nil && h.Decided >= st.index
		}
		if err == nil && st.inflight == 0 && st.unknown == 0 && quiet && st.decided {
			stable++
		} else {
			stable = 0
		}
		if stable >= 2 {
			l.settledIn = time.Since(l.start)
			l.done, l.waiting, l.failed = st.done, st.waiting, st.failed
			return
		}
		if time.Since(lastLog) > 30*time.Second {
			lastLog = time.Now()
			t.Logf("after %s: %d done, %d waiting, %d in flight, %d unknown, %.0f pins, decided up to Nomad's index: %v (err %v)",
				time.Since(l.start).Round(time.Second), len(st.done), len(st.waiting), st.inflight, st.unknown, pins-l.pins0, st.decided, err)
		}
		if l.s.proc.Exited() {
			t.Fatal("the scheduler exited during the load")
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after %s: %d done, %d waiting, %d in flight, %d unknown: %s",
				timeout, len(st.done), len(st.waiting), st.inflight, st.unknown, strings.Join(st.unknownIDs, " "))
		}
		time.Sleep(2 * time.Second)
	}
}

type pinSample struct {
	at   time.Time
	pins float64
}

// sample reads the scheduler's pin counter every 250ms, from the burst's
// start until stopSampling.
func (l *loadRun) sample() {
	stop, done := make(chan struct{}), make(chan struct{})
	l.pins1, l.lastPin = l.pins0, l.start
	go func() {
		defer close(done)
		window := []pinSample{{l.start, l.pins0}}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				pins := l.pinsTotal()
				if pins < 0 {
					continue
				}
				window = append(window, pinSample{now, pins})
				for len(window) > 1 && now.Sub(window[1].at) >= 5*time.Second {
					window = window[1:]
				}
				l.mu.Lock()
				if d := now.Sub(window[0].at).Seconds(); d >= 4.9 {
					l.peakPins = max(l.peakPins, (pins-window[0].pins)/d)
				}
				if pins != l.pins1 {
					l.pins1, l.lastPin = pins, now
				}
				l.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	l.stopSampling = func() { once.Do(func() { close(stop); <-done }) }
	l.e.t.Cleanup(l.stopSampling)
}

// loadState classifies the jobs from one look at Nomad and the scheduler.
type loadState struct {
	done, waiting     []*loadJob
	inflight, unknown int
	unknownIDs        []string
	// failed are the failed allocations (Reserve refused, or a task died)
	failed []string
	// index is Nomad's index of the allocations read, decided whether the
	// scheduler's last finished pass had read as far
	index   uint64
	decided bool
}

func (l *loadRun) observe() (loadState, error) {
	var st loadState
	allocs, meta, err := l.e.nomad.Allocations().List(nil)
	if err != nil {
		return st, err
	}
	st.index = meta.LastIndex
	var groups []service.Waiting
	if err := getJSON(l.s.http+"/v1/groups", &groups); err != nil {
		return st, err
	}
	pending := map[string]bool{}
	for _, g := range groups {
		pending[g.Job] = true
	}
	byJob := map[string][]*api.AllocationListStub{}
	for _, a := range allocs {
		if a.DesiredStatus == "run" {
			byJob[a.JobID] = append(byJob[a.JobID], a)
		}
	}
	for _, j := range l.jobs {
		running, complete, other := 0, 0, 0
		var last time.Time
		for _, a := range byJob[j.id] {
			switch a.ClientStatus {
			case "running":
				running++
			case "complete":
				complete++
			case "failed":
				st.failed = append(st.failed, a.ID+" of "+j.id)
			default:
				other++
			}
			if ts := a.TaskStates["work"]; ts != nil && ts.StartedAt.After(last) {
				last = ts.StartedAt
			}
		}
		if j.latency == 0 && running+complete == j.count && !last.IsZero() {
			j.latency = last.Sub(j.registered)
		}
		switch {
		case !j.batch && running == j.count && other == 0, j.batch && complete == j.count && other == 0:
			st.done = append(st.done, j)
		case running+complete+other > 0:
			st.inflight++
		case pending[j.id]:
			st.waiting = append(st.waiting, j)
		default:
			st.unknown++
			st.unknownIDs = append(st.unknownIDs, j.id)
		}
	}
	return st, nil
}
