package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

// Scenario 1: four 25-share jobs end up on one GPU; a fifth goes to
// another GPU.
func TestSchedulerPacksFractions(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	var first string
	for i := range 4 {
		id := fmt.Sprintf("quarter-%d", i)
		e.register(id, map[string]any{"shares": 25})
		a := e.running(id, 1, 60*time.Second)[0]
		g := gpus(a)
		must.SliceLen(t, 1, g)
		if i == 0 {
			first = g[0]
		}
		must.Eq(t, first, g[0], must.Sprintf("quarter-%d went to another GPU", i))
		env := taskEnvOf(t, e, a, "work")
		must.Eq(t, "0.25", env["GPUSHARE_FRACTION"])
		must.Eq(t, g[0], env["CUDA_VISIBLE_DEVICES"])
	}
	e.register("quarter-4", map[string]any{"shares": 25})
	a := e.running("quarter-4", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	must.NotEq(t, first, gpus(a)[0])

	// the placement and its reason are in the job and in the API
	job, _, err := e.nomad.Jobs().Info("quarter-4", nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, "gpushare", rec.Policy)
	must.SliceLen(t, 25, rec.Shares)
}

// Scenario 2: a 2-GPU job pinned to the DGX-1 gets an NV2 pair; a 4-GPU
// job gets a fully NVLink-connected quad on one socket.
func TestSchedulerTopologyCells(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	e.register("pair", map[string]any{"shares": 200, "model": modelV100})
	a := e.running("pair", 1, 60*time.Second)[0]
	g := gpus(a)
	must.SliceLen(t, 2, g)
	grp := e.group(a.NodeID)
	l, n0, n1 := link(grp, g[0], g[1])
	must.Eq(t, "NV2", l.String(), must.Sprintf("pair %v", g))
	must.Eq(t, n0, n1)
	env := taskEnvOf(t, e, a, "work")
	must.Eq(t, "2", env["GPUSHARE_FRACTION"])

	e.register("quad", map[string]any{"shares": 400, "model": modelV100})
	q := gpus(e.running("quad", 1, 60*time.Second)[0])
	must.SliceLen(t, 4, q)
	for i := range q {
		for j := i + 1; j < len(q); j++ {
			l, ni, nj := link(grp, q[i], q[j])
			must.Eq(t, devicefn.LinkNVLink, l.Kind, must.Sprintf("quad %v: %s-%s is %s", q, q[i], q[j], l))
			must.Eq(t, ni, nj, must.Sprintf("quad %v crosses sockets", q))
		}
	}
}

// Scenario 3: two compute-heavy production jobs are not put on one GPU
// while an empty GPU exists; a light and a heavy job are (under a bound
// with room for the prediction's uncertainty, the model's error of 0.19).
func TestSchedulerInterference(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", "production_max_slowdown = 0.3")
	heavy := map[string]any{"shares": 40, "model": modelP100, "class": "production", "sm_util": "0.9", "mem_bw": "0.7"}
	e.register("heavy-a", heavy)
	ga := gpus(e.running("heavy-a", 1, 60*time.Second)[0])
	e.register("heavy-b", heavy)
	gb := gpus(e.running("heavy-b", 1, 60*time.Second)[0])
	must.NotEq(t, ga[0], gb[0], must.Sprint("two heavy production jobs share a GPU while others are empty"))

	e.register("light", map[string]any{"shares": 40, "model": modelP100, "class": "production", "sm_util": "0.1", "mem_bw": "0.05"})
	gl := gpus(e.running("light", 1, 60*time.Second)[0])
	must.True(t, gl[0] == ga[0] || gl[0] == gb[0], must.Sprintf("light job on %s, not with a heavy one (%s, %s)", gl[0], ga[0], gb[0]))
	// why it is there is in the scheduler's records, not the job's meta
	var st struct {
		Groups []struct {
			Placement struct{ Reason string } `json:"placement"`
		}
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/light", &st))
	must.StrContains(t, st.Groups[0].Placement.Reason, "predicted")
	job, _, err := e.nomad.Jobs().Info("light", nil)
	must.NoError(t, err)
	rec, _ := pin.ParseRecord(job, "g")
	must.Eq(t, "", rec.Reason)
}

// Scenario 4: a guaranteed job preempts an opportunistic one, which is
// placed again once capacity frees.
func TestSchedulerPreemption(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", `virtual_cluster "team" {
  cell {
    gpus  = 2
    count = 1
    model = "Tesla P100-PCIE-16GB"
  }
}`)
	e.register("scavenger", map[string]any{"shares": 400, "model": modelP100, "class": "opportunistic"})
	old := e.running("scavenger", 1, 60*time.Second)[0]
	must.SliceLen(t, 4, gpus(old))

	e.register("owner", map[string]any{"shares": 200, "model": modelP100, "vc": "team"})
	must.SliceLen(t, 2, gpus(e.running("owner", 1, 90*time.Second)[0]))
	e.eventually(60*time.Second, "the opportunistic job to be gated again", func() bool {
		job, _, err := e.nomad.Jobs().Info("scavenger", nil)
		return err == nil && len(pin.Gated(job)) == 1
	})
	a, _, err := e.nomad.Allocations().Info(old.ID, nil)
	must.NoError(t, err)
	must.Eq(t, "stop", a.DesiredStatus)
	var st struct {
		Groups []struct{ State, Reason string }
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/scavenger", &st))
	must.Eq(t, "pending", st.Groups[0].State)

	e.purge("owner")
	must.SliceLen(t, 4, gpus(e.running("scavenger", 1, 90*time.Second)[0]))
}

// Scenario 5: the scheduler is killed in the middle of a burst of 50 jobs
// and restarted: every job is placed exactly once, none lost.
func TestSchedulerCrashDuringBurst(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", "")
	const n = 50
	for i := range n {
		e.register(fmt.Sprintf("burst-%02d", i), map[string]any{"shares": 10})
	}
	e.eventually(60*time.Second, "a few pins before the crash", func() bool {
		pinned := 0
		for i := range n {
			if e.version(fmt.Sprintf("burst-%02d", i)) > 0 {
				pinned++
			}
		}
		return pinned >= 5
	})
	s.proc.Kill()
	t.Log("scheduler killed with SIGKILL")
	e.startScheduler("s1-restarted", "")
	seen := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("burst-%02d", i)
		a := e.running(id, 1, 120*time.Second)[0]
		must.Eq(t, uint64(1), e.version(id), must.Sprintf("%s was registered more than once by the scheduler", id))
		for _, sh := range allocatedIDs(a) {
			other, dup := seen[sh]
			must.False(t, dup, must.Sprintf("share %s given to %s and %s", sh, other, id))
			seen[sh] = id
		}
	}
	must.MapLen(t, n*10, seen)
}

// Scenario 6: two replicas; the leader is killed and the other takes over
// and keeps placing.
func TestSchedulerFailover(t *testing.T) {
	e := newEnv(t)
	a := e.startScheduler("a", "")
	b := e.startScheduler("b", "")
	e.eventually(30*time.Second, "one leader", func() bool { return a.leader() != b.leader() })
	leader, follower := a, b
	if b.leader() {
		leader, follower = b, a
	}
	e.register("before", map[string]any{"shares": 50})
	e.running("before", 1, 60*time.Second)
	leader.proc.Kill()
	start := time.Now()
	e.eventually(60*time.Second, "the follower to take over", follower.leader)
	t.Logf("follower took over %s after the leader was killed (lock ttl 10s)", time.Since(start).Round(100*time.Millisecond))
	e.register("after", map[string]any{"shares": 50})
	e.running("after", 1, 60*time.Second)
}

// Scenario 6b: the leader is paused (SIGSTOP) past its lease while it
// waits to pin a decision; the follower takes over and pins the job; when
// the old leader continues (SIGCONT) it sends no pin, neither the one it
// was about to send nor any later.
func TestPausedLeaderSendsNoPin(t *testing.T) {
	e := newEnv(t)
	// inherited by both replicas; long enough that the leader is paused
	// within it on a loaded machine too
	t.Setenv("GPUSHARE_TEST_PIN_DELAY", "20s")
	a := e.startScheduler("a", "")
	b := e.startScheduler("b", "")
	e.eventually(30*time.Second, "one leader", func() bool { return a.leader() != b.leader() })
	old, next := a, b
	if b.leader() {
		old, next = b, a
	}
	e.register("race", map[string]any{"shares": 50})
	e.eventually(liveness, "the leader to decide (it then waits to pin)", func() bool { return placedDecisions(t, old) >= 1 })
	decided := time.Now()
	old.proc.Pause()
	start := time.Now()
	e.eventually(60*time.Second, "the follower to take over", next.leader)
	t.Logf("follower took over %s after the leader was paused (lock ttl 10s)", time.Since(start).Round(100*time.Millisecond))
	e.running("race", 1, 60*time.Second)
	old.proc.Resume()
	time.Sleep(time.Until(decided.Add(20*time.Second + time.Second))) // past the old leader's pin delay
	e.register("after", map[string]any{"shares": 50})
	e.running("after", 1, 60*time.Second)
	must.False(t, old.leader())
	must.EqOp(t, 0, metricOf(t, old, "gpushare_pin_requests_total")) // not even one refused by EnforceIndex
	must.EqOp(t, 2, metricOf(t, next, "gpushare_pins_total"))
	job, _, err := e.nomad.Jobs().Info("race", nil)
	must.NoError(t, err)
	must.EqOp(t, uint64(1), *job.Version) // pinned once
}

// placedDecisions is how many placements a replica has decided (a pin
// follows each, after GPUSHARE_TEST_PIN_DELAY).
func placedDecisions(t *testing.T, s *scheduler) int {
	t.Helper()
	return metricOf(t, s, `gpushare_decisions_total{outcome="placed"}`)
}

// metricOf reads a counter of a replica's /metrics.
func metricOf(t *testing.T, s *scheduler, name string) int {
	t.Helper()
	resp, err := http.Get(s.http + "/metrics")
	must.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			must.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// Scenario 7: the Nomad server restarts; the stream resumes and new jobs
// are still placed.
func TestSchedulerSurvivesNomadRestart(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", "")
	e.register("before", map[string]any{"shares": 30})
	e.running("before", 1, 60*time.Second)
	must.NoError(t, e.c.RestartServer(t.Context()))
	t.Log("nomad server restarted")
	e.register("after", map[string]any{"shares": 30})
	e.running("after", 1, 90*time.Second)
	must.False(t, s.proc.Exited())
	var h struct{ Synced bool }
	must.NoError(t, getJSON(s.http+"/v1/health", &h))
	must.True(t, h.Synced)
}

// Scenario 8: a user edits a job between decision and pin: the edit is
// kept and the job is placed.
func TestSchedulerKeepsConcurrentEdit(t *testing.T) {
	e := newEnv(t)
	// inherited by the scheduler process; long enough that the edit lands
	// within it on a loaded machine too
	t.Setenv("GPUSHARE_TEST_PIN_DELAY", "20s")
	s := e.startScheduler("s1", "")
	job := e.register("edited", map[string]any{"shares": 20})
	e.eventually(liveness, "the scheduler to decide (it then waits to pin)", func() bool { return placedDecisions(t, s) >= 1 })
	job.TaskGroups[0].Meta["owner"] = "alice"
	_, _, err := e.nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	e.running("edited", 1, 90*time.Second)
	final, _, err := e.nomad.Jobs().Info("edited", nil)
	must.NoError(t, err)
	must.Eq(t, "alice", final.TaskGroups[0].Meta["owner"])
	_, pinned := pin.ParseRecord(final, "g")
	must.True(t, pinned)
	must.SliceEmpty(t, pin.Gated(final))
}

// Observed profiles: a group without a declared profile that runs alone
// on its GPU gets the profile its GPU's stats show; the profile and the
// placement survive a failover (the records live in Nomad Variables: the
// second replica never samples stats itself in this test).
func TestSchedulerLearnsProfiles(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", `observe_interval = "1s"`)
	e.eventually(30*time.Second, "s1 leads", s.leader)
	follower := e.startScheduler("s2", `observe_interval = "1h"`)
	e.register("unprofiled", map[string]any{"shares": 30, "model": modelP100})
	a := e.running("unprofiled", 1, 60*time.Second)[0]
	gpu := gpus(a)[0]
	// the plugin reads its fixture again when it changes: the GPU gets busy
	src, err := os.ReadFile(e.fixtures["pcie"])
	must.NoError(t, err)
	block := fmt.Sprintf("gpu %q {\n", gpu)
	busy := strings.Replace(string(src), block, block+"  utilization_pct = 85\n  memory_utilization_pct = 40\n", 1)
	must.NotEq(t, string(src), busy)
	replaceFile(t, e.fixtures["pcie"], busy)
	var st struct {
		Groups []struct {
			Profile *struct {
				Name  string  `json:"name"`
				SM    float64 `json:"sm_util"`
				MemBW float64 `json:"mem_bw"`
			}
		}
	}
	e.eventually(60*time.Second, "a learned profile", func() bool {
		return getJSON(s.http+"/v1/jobs/unprofiled", &st) == nil && len(st.Groups) == 1 && st.Groups[0].Profile != nil && st.Groups[0].Profile.SM > 0.8
	})
	must.Eq(t, "learned", st.Groups[0].Profile.Name)
	must.Between(t, 0.35, st.Groups[0].Profile.MemBW, 0.41)
	var job struct {
		Groups []struct {
			State     string `json:"state"`
			Placement any    `json:"placement"`
		}
	}
	must.NoError(t, getJSON(s.http+"/v1/jobs/unprofiled", &job))

	// the leader saves its records; the follower, which never samples,
	// shows the learned profile and the placement's reason once it has
	// read them. The leader saves the reasons every 10 s and the learned
	// profiles every pass, and the follower reads both every 10 s: it can
	// show the profile from one save and the reason from the one before
	// (empty), so it waits for both before the leader goes.
	must.NotNil(t, job.Groups[0].Placement)
	e.eventually(liveness, "the follower to read the learned profile and the placement's reason from the leader's records", func() bool {
		var fs struct {
			Groups []struct {
				Placement any `json:"placement"`
				Profile   *struct{ Name string }
			}
		}
		return getJSON(follower.http+"/v1/jobs/unprofiled", &fs) == nil && len(fs.Groups) == 1 &&
			fs.Groups[0].Profile != nil && fs.Groups[0].Profile.Name == "learned" &&
			reflect.DeepEqual(fs.Groups[0].Placement, job.Groups[0].Placement)
	})
	must.NoError(t, getJSON(s.http+"/v1/jobs/unprofiled", &st))
	before := st.Groups[0].Profile // it keeps learning: a pass or two may go unsaved
	s.proc.Kill()
	e.eventually(60*time.Second, "the follower to take over", follower.leader)
	var after struct {
		Groups []struct {
			State     string `json:"state"`
			Placement any    `json:"placement"`
			Profile   *struct {
				Name  string  `json:"name"`
				SM    float64 `json:"sm_util"`
				MemBW float64 `json:"mem_bw"`
			}
		}
	}
	must.NoError(t, getJSON(follower.http+"/v1/jobs/unprofiled", &after))
	must.SliceLen(t, 1, after.Groups)
	must.Eq(t, job.Groups[0].State, after.Groups[0].State)
	must.Eq(t, job.Groups[0].Placement, after.Groups[0].Placement)
	must.NotNil(t, after.Groups[0].Profile) // s2 never samples: from the Variables
	must.Eq(t, "learned", after.Groups[0].Profile.Name)
	must.InDelta(t, before.SM, after.Groups[0].Profile.SM, 0.05)
	must.InDelta(t, before.MemBW, after.Groups[0].Profile.MemBW, 0.05)
}

// Scenario 9: while the PCIe node is full, a 10-hour job and then a
// 1-minute job wait for all of it; when it frees, the short job goes
// first (response ratio: it has waited a larger share of its run time),
// where submission order would have served the long one.
func TestSchedulerServesShortJobsFirst(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", "")
	whole := func(expected string) map[string]any {
		return map[string]any{"shares": 400, "model": modelP100, "expected": expected}
	}
	e.register("blocker", whole(""))
	e.running("blocker", 1, 60*time.Second)
	pending := func(id string) func() bool {
		return func() bool {
			var st struct {
				Groups []struct{ State, Reason string }
			}
			return getJSON(s.http+"/v1/jobs/"+id, &st) == nil && len(st.Groups) == 1 && st.Groups[0].State == "pending"
		}
	}
	e.register("long", whole("10h"))
	e.eventually(30*time.Second, "the long job to wait", pending("long"))
	e.register("short", whole("1m"))
	e.eventually(30*time.Second, "the short job to wait", pending("short"))

	e.purge("blocker")
	must.SliceLen(t, 4, gpus(e.running("short", 1, 90*time.Second)[0]))
	job, _, err := e.nomad.Jobs().Info("long", nil)
	must.NoError(t, err)
	must.SliceLen(t, 1, pin.Gated(job), must.Sprint("the 10-hour job was placed before the 1-minute job"))
	must.True(t, pending("long")())
}

// Scenario 10: reservations with backfilling. The PCIe node runs a 3-GPU
// job that expects 2 hours; a 4-GPU job that expects 3 hours cannot start
// and holds the node. A 5-hour single-GPU job may not take the free GPU
// (it would delay the 4-GPU job); a 30-minute one may.
func TestSchedulerReservesForMultiGPUJobs(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s1", "")
	job := func(shares int, expected string) map[string]any {
		return map[string]any{"shares": shares, "model": modelP100, "expected": expected}
	}
	e.register("three", job(300, "2h"))
	e.running("three", 1, 60*time.Second)
	reason := func(id string) string {
		var st struct {
			Groups []struct{ State, Reason string }
		}
		if getJSON(s.http+"/v1/jobs/"+id, &st) != nil || len(st.Groups) != 1 || st.Groups[0].State != "pending" {
			return ""
		}
		return st.Groups[0].Reason
	}
	e.register("four", job(400, "3h"))
	e.eventually(30*time.Second, "the 4-GPU job to hold the node", func() bool { return strings.Contains(reason("four"), "holds 1 node(s)") })
	e.register("long", job(100, "5h"))
	e.eventually(30*time.Second, "the 5-hour job to wait for the held node", func() bool {
		return strings.Contains(reason("long"), "held for default/four/g")
	})
	e.register("short", job(100, "30m"))
	must.SliceLen(t, 1, gpus(e.running("short", 1, 60*time.Second)[0]))
	must.StrContains(t, reason("long"), "held for default/four/g")
}
