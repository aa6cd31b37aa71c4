package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestPlacementLatency measures the time from job registration to a
// running, pinned allocation for 50 gated jobs, and compares it with the
// same jobs placed by Nomad alone (gate removed, adopt_ungated off), in
// one cluster. Those all fail in Reserve; BenchmarkBurstOverhead measures
// the scheduler's own overhead against the same jobs registered pinned.
func TestPlacementLatency(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "adopt_ungated = false")
	const n = 50

	ours := e.burst("lat", n, true)
	p50, p99 := percentiles(ours.latencies)
	t.Logf("LATENCY gpushare: %d/%d jobs running pinned; registration -> running p50=%s p99=%s", len(ours.latencies), n, p50, p99)
	must.Eq(t, n, len(ours.latencies))
	must.Eq(t, 0, ours.failed)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lat-%02d", i)
	}
	e.purge(ids...)

	native := e.burst("native", n, false)
	q50, q99 := percentiles(native.latencies)
	t.Logf("LATENCY nomad alone: %d/%d running, %d failed in Reserve (shares spread over several GPUs); registration -> first client status p50=%s p99=%s",
		len(native.latencies)-native.failed, n, native.failed, q50, q99)
}

type burstResult struct {
	latencies []time.Duration
	failed    int
}

// burst registers n 10-share jobs, gated or not, and waits until each has
// an allocation that is running or failed.
func (e *env) burst(prefix string, n int, gated bool) burstResult {
	e.t.Helper()
	registered := map[string]time.Time{}
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		job := e.parse(id, map[string]any{"shares": 10})
		if !gated {
			job.TaskGroups[0].Constraints = slices.DeleteFunc(job.TaskGroups[0].Constraints, pin.IsGate)
		}
		registered[id] = time.Now()
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(e.t, err)
	}
	var res burstResult
	done := map[string]bool{}
	e.eventually(3*time.Minute, fmt.Sprintf("%d %s jobs to run or fail", n, prefix), func() bool {
		allocs, _, err := e.nomad.Allocations().List(nil)
		if err != nil {
			return false
		}
		now := time.Now()
		for _, a := range allocs {
			at, ok := registered[a.JobID]
			if !ok || done[a.JobID] {
				continue
			}
			switch a.ClientStatus {
			case "running":
				done[a.JobID] = true
				res.latencies = append(res.latencies, now.Sub(at))
			case "failed":
				done[a.JobID] = true
				res.failed++
				res.latencies = append(res.latencies, now.Sub(at))
			}
		}
		return len(done) == n
	})
	return res
}

// TestAdoptUngated registers 20 jobs of 25 shares with the Nomad API and
// no gate: Nomad alone would take each job's shares from several GPUs,
// which Reserve refuses; the scheduler adopts them and every job ends
// running on shares of one GPU.
func TestAdoptUngated(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	const n = 20
	for i := range n {
		id := fmt.Sprintf("plain-%02d", i)
		job := e.parse(id, map[string]any{"shares": 25})
		job.TaskGroups[0].Constraints = slices.DeleteFunc(job.TaskGroups[0].Constraints, pin.IsGate)
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
	}
	start := time.Now()
	var shares map[string][]string
	e.eventually(3*time.Minute, fmt.Sprintf("%d ungated jobs running on one GPU each", n), func() bool {
		stubs, _, err := e.nomad.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
		if err != nil {
			return false
		}
		shares = map[string][]string{}
		for _, a := range stubs {
			if a.ClientStatus != "running" || a.DesiredStatus != "run" || a.AllocatedResources == nil {
				continue
			}
			for _, tr := range a.AllocatedResources.Tasks {
				for _, d := range tr.Devices {
					shares[a.JobID] = append(shares[a.JobID], d.DeviceIDs...)
				}
			}
		}
		return len(shares) == n
	})
	t.Logf("ADOPT %d ungated 25-share jobs running in %s", n, time.Since(start).Round(time.Millisecond))
	for id, ids := range shares {
		must.SliceLen(t, 25, ids, must.Sprintf("job %s", id))
		gpu := ids[0][:strings.LastIndexByte(ids[0], ':')]
		for _, sh := range ids {
			must.StrHasPrefix(t, gpu+":", sh, must.Sprintf("job %s runs on one GPU", id))
		}
		job, _, err := e.nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		_, pinned := pin.ParseRecord(job, "g")
		must.True(t, pinned, must.Sprintf("job %s was pinned by the scheduler", id))
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond) }
	return at(0.50), at(0.99)
}
