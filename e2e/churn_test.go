package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestChurn is the flow under churn (make soak: 10,000 jobs; make test:
// 1,000): finite jobs (batch jobs of a few seconds and short services the
// test stops after they ran a few seconds; 10 to 400 shares, some groups
// of count 2) arrive over time in waves faster and slower than the
// cluster's nine fixture clients (64 GPUs) take them, gated, with the real
// plugin and one `gpushare scheduler`. Each finished job is purged. Every
// job must complete; from Nomad's allocations (its event stream, and a
// full list every 30s) no share may be in two live allocations and every
// allocation's shares must be a fraction of one GPU or whole GPUs; no
// allocation may fail; and once all are purged the scheduler's records
// (/v1/groups, its jobs, the items of its gpushare/state/ Variables) must
// shrink to nothing. Then the scheduler stops and the baselines run,
// placed by Nomad alone: the same jobs at the same arrivals without the
// gate and without their GPU ask (Nomad's own path from registration to a
// running task; Nomad's device allocator cannot keep a fraction on one
// GPU), and the first 50 with their GPU ask and no gate (what the plugin
// makes of the shares Nomad picks). Their figures are reported beside the
// gated run's, never asserted. The figures are logged in one block of
// CHURN lines.
//
// GPUSHARE_LOAD=<N> sets the number of jobs (make soak: 10000); unset, the
// short version runs 1,000 (about 11 minutes on two quiet cores, 25 on
// busy ones: Nomad's evaluation queue sets the pace, two evaluations a
// gated job; docs/design.md); GPUSHARE_LOAD=0 skips it. GPUSHARE_BASELINE=<B>
// runs the first B of them in the baseline (default N/10, at least 100).
func TestChurn(t *testing.T) {
	n := 1000
	if v := os.Getenv("GPUSHARE_LOAD"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		must.NoError(t, err, must.Sprint("GPUSHARE_LOAD is the number of jobs"))
	}
	if n <= 0 {
		t.Skip("GPUSHARE_LOAD=0: no churn run")
	}
	e := newLoadEnv(t)
	s := e.startSchedulerLevel("s1", "info", "")
	c := &churn{e: e, s: s, n: n}
	c.total = c.gpuShares()

	cpu0, _ := procCPU(s.proc.Pid())
	c.gated = c.run("churn-", gated, n)
	c.cpu, _ = procCPU(s.proc.Pid())
	c.pins1 = schedPins(s)
	c.cpu -= cpu0
	c.hwm, _ = procHWM(s.proc.Pid())
	c.checkGated()
	c.records()
	c.schedLog()

	// the baselines, the scheduler stopped: the same jobs placed by Nomad
	// alone without their GPU ask (latency), and a sample with it (what
	// Nomad's device allocator makes of shares)
	s.proc.Stop()
	c.ungated = c.run("nomad-", nomadAlone, baselineSize(t, n))
	c.devices = c.run("nomadgpu-", nomadDevices, min(n, 50))
	c.report()
}

// baselineSize is how many of the n jobs (the first ones) the baseline
// runs: GPUSHARE_BASELINE, or n/10 (at least 100), which keeps make test's
// run short; the ratio compares the latencies of these same jobs.
func baselineSize(t *testing.T, n int) int {
	if v := os.Getenv("GPUSHARE_BASELINE"); v != "" {
		b, err := strconv.Atoi(v)
		must.NoError(t, err, must.Sprint("GPUSHARE_BASELINE is the number of jobs of the baseline"))
		return min(max(b, 1), n)
	}
	return min(n, max(100, n/10))
}

// churn is one churn test: the gated run, the baseline and the checks'
// findings.
type churn struct {
	e     *env
	s     *scheduler
	n     int
	total map[string]int // shares per GPU

	gated, ungated, devices *churnRun
	cpu                     time.Duration
	pins1                   float64
	hwm                     int
	recordsAtEnd            string
	recordsIn               time.Duration
	noAllocLines            int
	warnLines               int
	warnings                map[string]int
	// warnFirst is the first whole line of each kind of warnings (its
	// fields say which job and what error: the log is gone with a passing
	// run's directory)
	warnFirst map[string]string
}

// churnJob is one job of the churn and what was seen of it.
type churnJob struct {
	id            string
	shares, count int
	batch         bool
	// run is how long a batch job's task sleeps, or how long the test
	// lets a service run before it stops it
	run time.Duration
	// at is its arrival, from the run's start
	at time.Duration

	registered time.Time
	// latency is registration -> the last of its allocations started
	latency time.Duration
	allocs  []string
	// stopAt is set once a service's allocations all run; stopped once
	// it was deregistered; done once the job completed (batch) or its
	// allocations stopped after the test stopped it (service); failed
	// when one of its allocations failed; purged once the finished job
	// was purged
	stopAt              time.Time
	stopQueued, stopped bool
	stoppedAt           time.Time
	purgeQueued, purged bool
	done, failed        bool
}

// churnAct is a stop (purge false) or a purge the test sends to Nomad.
type churnAct struct {
	j     *churnJob
	purge bool
	// check: stop it again only if Nomad's job is no longer stopped
	check bool
}

// churn arrivals: waves of churnWave at churnHigh jobs/s, then churnWave at
// churnLow jobs/s; on two cores Nomad alone starts fewer than churnHigh
// tasks a second (about 2), so work queues at the gate in a high wave and
// drains in a low one.
const (
	churnHigh = 4.0
	churnLow  = 1.0
	churnWave = 15 * time.Second
)

// churnJobs draws n jobs with a seeded generator: 10/25/50/100/200/400
// shares (small ones more often, a few multi-GPU), 10% of the fractional
// groups of count 2, 70% batch jobs of 1-3s, the rest services run 1-3s,
// and their arrivals (exponential gaps at the wave's rate).
func churnJobs(n int, prefix string, seed uint64) []*churnJob {
	r := rand.New(rand.NewPCG(seed, 2))
	sizes := []struct{ shares, weight int }{{10, 30}, {25, 25}, {50, 17}, {100, 20}, {200, 6}, {400, 2}}
	jobs := make([]*churnJob, n)
	var at time.Duration
	for i := range jobs {
		w := r.IntN(100)
		j := &churnJob{id: fmt.Sprintf("%s%05d", prefix, i), count: 1}
		for _, s := range sizes {
			if w < s.weight {
				j.shares = s.shares
				break
			}
			w -= s.weight
		}
		if j.shares < 100 && r.IntN(100) < 10 {
			j.count = 2
		}
		j.batch = r.IntN(100) < 70
		j.run = time.Duration(1+r.IntN(3)) * time.Second
		rate := churnHigh
		if (at/churnWave)%2 == 1 {
			rate = churnLow
		}
		at += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
		j.at = at
		jobs[i] = j
	}
	return jobs
}

// churnMode is how a run registers the job set.
type churnMode int

const (
	// gated: as `gpushare job run` registers them
	gated churnMode = iota
	// nomadAlone: without the gate and without the GPU ask, placed by
	// Nomad alone on CPU and memory (the baseline of latency)
	nomadAlone
	// nomadDevices: without the gate, the GPU ask placed by Nomad's own
	// device allocator
	nomadDevices
)

func (m churnMode) String() string {
	return [...]string{"gated", "Nomad alone, no GPU ask", "Nomad alone, GPU ask"}[m]
}

// apiJob is the job as `gpushare job run` registers it (gated), or without
// the gate: 20 MHz and 32 MiB a task, restarts and rescheduling off, so a
// failed allocation stays failed, and no log collection (a task is one
// process less to start).
func (j *churnJob) apiJob(mode churnMode) *api.Job {
	var job *api.Job
	cmd := "exec sleep 3600"
	if j.batch {
		job = api.NewBatchJob(j.id, j.id, "global", 50)
		cmd = fmt.Sprintf("exec sleep %d", int(j.run.Seconds()))
	} else {
		job = api.NewServiceJob(j.id, j.id, "global", 50)
		job.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Second), HealthyDeadline: ptr(time.Minute)}
	}
	job.Datacenters = []string{"*"}
	tg := api.NewTaskGroup("g", j.count)
	tg.RestartPolicy = &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	tg.EphemeralDisk = &api.EphemeralDisk{SizeMB: ptr(10)}
	task := api.NewTask("work", "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", cmd})
	res := &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)}
	if mode != nomadAlone {
		res.Devices = []*api.RequestedDevice{{Name: pin.DeviceName, Count: ptr(uint64(j.shares))}}
	}
	task.Require(res)
	task.LogConfig = &api.LogConfig{Disabled: ptr(true), MaxFiles: ptr(1), MaxFileSizeMB: ptr(1)}
	task.KillTimeout = ptr(time.Second)
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	if mode == gated {
		pin.AddGate(job)
	}
	return job
}

// run registers the jobs at their arrivals, stops each service once it ran
// its time, purges each finished job, and returns when every job finished
// (or failed), or when none finished for liveness (the rest are lost).
func (c *churn) run(prefix string, mode churnMode, n int) *churnRun {
	t := c.e.t
	r := &churnRun{c: c, mode: mode, jobs: churnJobs(n, prefix, 42), allocs: map[string]*allocSeen{}, owner: map[string]string{}}
	r.byID = map[string]*churnJob{}
	for _, j := range r.jobs {
		r.byID[j.id] = j
	}
	r.stopq = make(chan churnAct, 4*len(r.jobs))
	stopWatch := r.watch()
	defer stopWatch()
	var wg sync.WaitGroup
	for range 3 { // stop services, purge finished jobs
		wg.Add(1)
		go func() {
			defer wg.Done()
			for act := range r.stopq {
				if act.check { // stop it again if Nomad undid the stop
					job, _, err := c.e.nomad.Jobs().Info(act.j.id, nil)
					if err != nil || job.Stop == nil || *job.Stop {
						continue
					}
					r.mu.Lock()
					r.restops++
					r.mu.Unlock()
				}
				_, _, err := c.e.nomad.Jobs().Deregister(act.j.id, act.purge, nil)
				r.mu.Lock()
				if err != nil {
					r.errs = append(r.errs, fmt.Sprintf("deregistering %s (purge %v): %v", act.j.id, act.purge, err))
				}
				if act.purge {
					act.j.purged = true
					r.purged(act.j)
				} else {
					act.j.stopped, act.j.stoppedAt = true, time.Now()
					r.progress(act.j)
				}
				r.mu.Unlock()
			}
		}()
	}
	defer func() { close(r.stopq); wg.Wait() }()

	r.start = time.Now()
	if mode == gated {
		r.pins0 = schedPins(c.s)
	}
	regDone := r.arrive()
	lastDone, lastLog := time.Now(), time.Now()
	prevDone := 0
	for {
		time.Sleep(time.Second)
		now := time.Now()
		r.mu.Lock()
		for _, j := range r.jobs { // services that ran their time
			if !j.stopAt.IsZero() && !j.stopQueued && !j.done && !j.failed && now.After(j.stopAt) {
				j.stopQueued = true
				r.stopq <- churnAct{j: j}
			}
			// Nomad may undo a stop: a plan computed before it that marks
			// the job's deployment successful writes the running version
			// back as the job (its state store's job stability update);
			// the test stops it again and counts it
			if j.stopped && !j.done && !j.failed && now.Sub(j.stoppedAt) > 30*time.Second {
				j.stoppedAt = now
				r.stopq <- churnAct{j: j, check: true}
			}
		}
		done, failed, registered, running, over := 0, 0, 0, 0, 0
		for _, j := range r.jobs {
			if j.purged {
				over++
			}
			switch {
			case j.done:
				done++
			case j.failed:
				failed++
			case !j.stopAt.IsZero() && !j.stopped:
				running++
			}
			if !j.registered.IsZero() {
				registered++
			}
		}
		r.mu.Unlock()
		if done+failed+over > prevDone {
			prevDone, lastDone = done+failed+over, now
		}
		select {
		case <-regDone:
			if over == len(r.jobs) {
				r.end = now
				r.finish()
				return r
			}
		default:
			lastDone = now // the registrations go on
		}
		if now.Sub(lastLog) >= 30*time.Second {
			lastLog = now
			b := r.sampleBroker()
			t.Logf("%s (%s) after %s: %d registered, %d done, %d failed, %d services running, %d placements; Nomad's eval broker: %d ready, %d pending, %d blocked (%d escaped)",
				prefix, mode, now.Sub(r.start).Round(time.Second), registered, done, failed, running, r.placements(), b.ready, b.pending, b.blocked, b.escaped)
		}
		if mode == gated && c.s.proc.Exited() {
			t.Fatal("the scheduler exited during the churn")
		}
		if now.Sub(lastDone) > liveness {
			r.end = now
			r.finish()
			r.stalled = true
			return r
		}
	}
}

// arrive registers each job at its arrival from four goroutines; the
// channel closes when all are registered.
func (r *churnRun) arrive() <-chan struct{} {
	next := make(chan *churnJob)
	out := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				job := j.apiJob(r.mode)
				reg := time.Now()
				_, _, err := r.c.e.nomad.Jobs().Register(job, nil)
				r.mu.Lock()
				j.registered = reg
				if err != nil {
					r.errs = append(r.errs, fmt.Sprintf("registering %s: %v", j.id, err))
					j.failed, j.purgeQueued, j.purged = true, true, true
				}
				r.mu.Unlock()
			}
		}()
	}
	go func() {
		for _, j := range r.jobs {
			time.Sleep(time.Until(r.start.Add(j.at)))
			next <- j
		}
		close(next)
		wg.Wait()
		r.mu.Lock()
		r.registeredAt = time.Now()
		r.mu.Unlock()
		close(out)
	}()
	return out
}

// checkGated fails the test on what the gated run got wrong.
func (c *churn) checkGated() {
	t, r := c.e.t, c.gated
	var lost []string
	for _, j := range r.jobs {
		if !j.done {
			lost = append(lost, c.whyLost(j))
		}
	}
	for what, list := range map[string][]string{
		"errors": r.errs, "lost jobs (not completed)": lost, "shares given twice": r.twice,
		"allocations with invalid shares": r.invalid, "failed allocations": r.failedAllocs,
	} {
		must.SliceEmpty(t, list, must.Sprintf("%s:\n%s", what, strings.Join(list, "\n")))
	}
}

// whyLost says what Nomad and the scheduler say of a job that did not
// complete.
func (c *churn) whyLost(j *churnJob) string {
	s := fmt.Sprintf("%s (%d x %d shares, batch %v): registered %v, allocations %v, stopped %v",
		j.id, j.count, j.shares, j.batch, !j.registered.IsZero(), j.allocs, j.stopped)
	if job, _, err := c.e.nomad.Jobs().Info(j.id, nil); err == nil {
		s += fmt.Sprintf("; Nomad: status %s, gated %v", *job.Status, pin.Gated(job))
	}
	var js service.JobStatus
	if c.s != nil && getJSON(c.s.http+"/v1/jobs/"+j.id, &js) == nil {
		s += fmt.Sprintf("; scheduler: %+v", js.Groups)
	}
	return s
}

// records waits until the scheduler's records hold nothing of the purged
// jobs: no waiting group, no job, no reasons, no other item but its key.
func (c *churn) records() {
	start := time.Now()
	var groups []service.Waiting
	var h service.Health
	var pins, reasons int
	c.e.eventually(2*time.Minute, "the scheduler's records to shrink to nothing once every job is purged", func() bool {
		groups = groups[:0]
		if getJSON(c.s.http+"/v1/groups", &groups) != nil || getJSON(c.s.http+"/v1/health", &h) != nil {
			return false
		}
		pins, reasons = stateItems(c.e)
		c.recordsAtEnd = fmt.Sprintf("/v1/groups=%d, scheduler jobs=%d, reasons items=%d, other record items=%d (the key)", len(groups), h.Jobs, reasons, pins)
		return len(groups) == 0 && h.Jobs == 0 && reasons == 0 && pins <= 1
	})
	c.recordsIn = time.Since(start)
}

// schedLog counts the scheduler's warnings and errors by message, keeps
// the first line of each, and counts those of a pin Nomad made no
// allocation for.
func (c *churn) schedLog() {
	b, err := os.ReadFile(filepath.Join(c.e.dir, "s1.log"))
	if err != nil {
		return
	}
	c.warnings, c.warnFirst = map[string]int{}, map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		for _, level := range []string{"WARN", "ERROR"} {
			// 2026-...Z [WARN]  gpushare: message: key=value ...
			if _, msg, ok := strings.Cut(line, "["+level+"]"); ok {
				msg = strings.TrimSpace(msg)
				if name, rest, ok := strings.Cut(msg, ": "); ok && !strings.Contains(name, " ") {
					msg = rest
				}
				msg, _, _ = strings.Cut(msg, ": ")
				kind := level + " " + msg
				c.warnings[kind]++
				c.warnLines++
				if _, seen := c.warnFirst[kind]; !seen {
					c.warnFirst[kind] = line[:min(len(line), 600)]
				}
			}
		}
		if strings.Contains(line, "pinned group has no allocation") {
			c.noAllocLines++
		}
	}
}
