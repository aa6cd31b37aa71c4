package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// burstSize is how many jobs BenchmarkBurstOverhead registers at once.
const burstSize = 50

// BenchmarkBurstOverhead measures what the scheduler adds to the placement
// of a burst of jobs. Each iteration, on one cluster with one scheduler
// replica:
//
//   - gated: 50 gated 10-share jobs are registered at once; the scheduler
//     pins them and Nomad places them;
//   - pinned: the jobs are purged (all their capacity is free again) and
//     the very versions the scheduler wrote, pins and signatures included,
//     are registered at once, so that Nomad places them with nothing left
//     for the scheduler to do; then they are purged again.
//
// Both record, per job, registration -> allocation created (Nomad's plan)
// and registration -> task started. The scheduler's overhead is the
// difference of the percentiles of a gated burst and of the pinned burst
// that follows it, the median over the iterations (one slow burst of
// Nomad's on a busy machine moves the pooled p99 by seconds); the pooled
// percentiles are logged too. A first, unmeasured gated burst warms the
// cluster up. An iteration takes about 20s on 2 cores (make bench runs 3).
func BenchmarkBurstOverhead(b *testing.B) {
	e := newEnv(b)
	e.startSchedulerLevel("s1", "info", "adopt_ungated = false")

	warm := e.timedBurst(gatedJobs(e, "warm"))
	e.purge(warm.ids...)

	var gated, pinned []burstTimes
	// registration -> the scheduler's pin registered, and from when Nomad
	// accepted the registration (its first version's submit time)
	var pinAt, reacted []time.Duration
	bursts := 0
	for ; b.Loop(); bursts++ {
		i := bursts
		g := e.timedBurst(gatedJobs(e, fmt.Sprintf("burst%d", i)))
		jobs := make([]*api.Job, 0, len(g.ids))
		for _, id := range g.ids {
			job, _, err := e.nomad.Jobs().Info(id, nil)
			must.NoError(b, err)
			_, ok := pin.ParseRecord(job, "g")
			must.True(b, ok, must.Sprintf("job %s was pinned by the scheduler", id))
			must.MapContainsKey(b, pin.Group(job, "g").Meta, pin.MetaSignature)
			pinned := time.Unix(0, *job.SubmitTime)
			pinAt = append(pinAt, pinned.Sub(g.at[len(jobs)]))
			versions, _, _, err := e.nomad.Jobs().Versions(id, false, nil)
			must.NoError(b, err)
			first := versions[len(versions)-1] // newest first
			must.Eq(b, 0, *first.Version)
			reacted = append(reacted, pinned.Sub(time.Unix(0, *first.SubmitTime)))
			jobs = append(jobs, job)
		}
		e.purge(g.ids...)
		p := e.timedBurst(jobs)
		e.purge(p.ids...)
		gated = append(gated, g)
		pinned = append(pinned, p)
	}

	created := func(t burstTimes) []time.Duration { return t.created }
	running := func(t burstTimes) []time.Duration { return t.running }
	gc50, gc99 := percentiles(pool(gated, created))
	pc50, pc99 := percentiles(pool(pinned, created))
	gr50, gr99 := percentiles(pool(gated, running))
	pr50, pr99 := percentiles(pool(pinned, running))
	oc50, oc99 := overhead(gated, pinned, created)
	or50, or99 := overhead(gated, pinned, running)
	b.Logf("BURST %d jobs at once, %d burst(s) each: registration -> allocation created: gated p50=%s p99=%s, pinned p50=%s p99=%s; scheduler overhead p50=%s p99=%s (pooled: %s, %s)",
		burstSize, bursts, gc50, gc99, pc50, pc99, oc50, oc99, gc50-pc50, gc99-pc99)
	p50, p99 := percentiles(pinAt)
	b.Logf("BURST registration -> pinned version registered by the scheduler: p50=%s p99=%s", p50, p99)
	r50, r99 := percentiles(reacted)
	b.Logf("BURST gated version accepted by Nomad -> pinned version registered: p50=%s p99=%s", r50, r99)
	b.Logf("BURST registration -> task started: gated p50=%s p99=%s, pinned p50=%s p99=%s; scheduler overhead p50=%s p99=%s (pooled: %s, %s)",
		gr50, gr99, pr50, pr99, or50, or99, gr50-pr50, gr99-pr99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op") // an iteration's wall time says nothing here
	b.ReportMetric(ms(gc50), "gated-created-p50-ms")
	b.ReportMetric(ms(gc99), "gated-created-p99-ms")
	b.ReportMetric(ms(pc50), "pinned-created-p50-ms")
	b.ReportMetric(ms(pc99), "pinned-created-p99-ms")
	b.ReportMetric(ms(oc50), "overhead-p50-ms")
	b.ReportMetric(ms(oc99), "overhead-p99-ms")
	b.ReportMetric(ms(p50), "pin-p50-ms")
	b.ReportMetric(ms(p99), "pin-p99-ms")
	b.ReportMetric(ms(r50), "accepted-to-pin-p50-ms")
	b.ReportMetric(ms(r99), "accepted-to-pin-p99-ms")
	b.ReportMetric(ms(or50), "overhead-running-p50-ms")
	b.ReportMetric(ms(or99), "overhead-running-p99-ms")
}

// gatedJobs is a burst of gated 10-share jobs named prefix-NN.
func gatedJobs(e *env, prefix string) []*api.Job {
	jobs := make([]*api.Job, burstSize)
	for i := range jobs {
		jobs[i] = e.parse(fmt.Sprintf("%s-%02d", prefix, i), map[string]any{"shares": 10})
	}
	return jobs
}

// burstTimes are the latencies of the jobs of one or more bursts.
type burstTimes struct {
	ids []string
	at  []time.Time // registrations
	// created: registration -> allocation created; running: registration
	// -> its task started.
	created, running []time.Duration
}

// pool is one latency of all the bursts.
func pool(bursts []burstTimes, of func(burstTimes) []time.Duration) []time.Duration {
	var out []time.Duration
	for _, t := range bursts {
		out = append(out, of(t)...)
	}
	return out
}

// overhead is the median over the pairs of a gated burst and the pinned
// burst after it of the differences of their p50s, and of their p99s.
func overhead(gated, pinned []burstTimes, of func(burstTimes) []time.Duration) (p50, p99 time.Duration) {
	var d50, d99 []time.Duration
	for i := range gated {
		g50, g99 := percentiles(of(gated[i]))
		q50, q99 := percentiles(of(pinned[i]))
		d50, d99 = append(d50, g50-q50), append(d99, g99-q99)
	}
	return median(d50), median(d99)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// timedBurst registers the jobs at once, one goroutine each, and waits
// until every job has an allocation whose task started. The times are
// Nomad's: the allocation's creation and the task's start (same machine,
// same clock as the registration's), so the polling interval does not
// count.
func (e *env) timedBurst(jobs []*api.Job) burstTimes {
	e.t.Helper()
	type reg struct {
		at    time.Time
		index uint64 // allocations of an earlier job of the same ID have a lower create index
	}
	regs := make([]reg, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, job := range jobs {
		wg.Go(func() {
			<-start
			regs[i].at = time.Now()
			resp, _, err := e.nomad.Jobs().Register(job, nil)
			if err == nil {
				regs[i].index = resp.JobModifyIndex
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	byID := map[string]int{}
	for i, job := range jobs {
		must.NoError(e.t, errs[i], must.Sprintf("registering %s", *job.ID))
		byID[*job.ID] = i
	}
	res := burstTimes{created: make([]time.Duration, len(jobs)), running: make([]time.Duration, len(jobs))}
	for i, job := range jobs {
		res.ids = append(res.ids, *job.ID)
		res.at = append(res.at, regs[i].at)
	}
	done := make([]bool, len(jobs))
	e.eventually(3*time.Minute, fmt.Sprintf("%d jobs of a burst to start", len(jobs)), func() bool {
		allocs, _, err := e.nomad.Allocations().List(nil)
		if err != nil {
			return false
		}
		for _, a := range allocs {
			i, ok := byID[a.JobID]
			if !ok || done[i] || a.CreateIndex <= regs[i].index || a.DesiredStatus != api.AllocDesiredStatusRun {
				continue
			}
			if a.ClientStatus == api.AllocClientStatusFailed {
				e.t.Fatalf("allocation %s of %s failed", a.ID, a.JobID)
			}
			ts := a.TaskStates["work"]
			if ts == nil || ts.StartedAt.IsZero() {
				continue
			}
			done[i] = true
			res.created[i] = time.Unix(0, a.CreateTime).Sub(regs[i].at)
			res.running[i] = ts.StartedAt.Sub(regs[i].at)
		}
		return !slices.Contains(done, false)
	})
	return res
}
