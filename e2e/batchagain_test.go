package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// batchAgainSpec is a gated batch job of 3 quarter GPUs: index 0 exits
// at once, the others wait for the file done.
const batchAgainSpec = `job %q {
  type        = "batch"
  datacenters = ["*"]
  group "g" {
    count = 3
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "work" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "[ \"$NOMAD_ALLOC_INDEX\" = 0 ] && exit 0; while [ ! -e %s ]; do sleep 1; done"]
      }
      resources {
        cpu    = 20
        memory = 16
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
}
`

// A pipeline registers the same batch file again while it runs, one of
// its allocations completed, and again after it ended. Under Nomad alone an
// unchanged job makes no new version, and nothing runs again. Through
// `gpushare job run`, which carries the running version's pin over, the
// same holds: no version, no allocation created. Through `nomad job run`,
// the file (gated) is a new version, and Nomad ignores the terminal
// allocations of an older version of a batch job; the scheduler writes
// the pinned version with the count lowered by what ended
// (scheduler/service/batchended.go), so nothing that ended runs again,
// and the two running are kept. The job declares no run time: once its
// three allocations finished, the scheduler says it expects the next run
// to take their median (learned run times, docs/users.md).
func TestBatchRegisteredAgain(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s", "")
	e.eventually(30*time.Second, "the scheduler to lead", s.leader)
	dir := t.TempDir()
	run := func(bin string, args ...string) string {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.c.Address(), "GPUSHARE_ADDR="+s.http)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Logf("%s %v: exit %d\n%s", filepath.Base(bin), args, ee.ExitCode(), out)
			return string(out)
		}
		must.NoError(t, err, must.Sprint(string(out)))
		return string(out)
	}
	const id = "batch-again"
	done := filepath.Join(dir, id+".done")
	path := filepath.Join(dir, id+".nomad.hcl")
	must.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(batchAgainSpec, id, done)), 0o644))
	run(nomadBin, "job", "run", "-detach", path)
	running := e.oneCompleteTwoRun(id)
	e.quiet(id, s)
	seen := e.allocIDs(id)
	again := func(bin, when string, newVersion bool) {
		t.Helper()
		v := e.version(id)
		out := run(bin, "job", "run", "-detach", path)
		e.quiet(id, s)
		created := e.createdList(id, seen)
		t.Logf("%s, registered again by %s: job version %d -> %d, count %d; created: %v\n%s", when, filepath.Base(bin), v, e.version(id), e.count(id), created, out)
		must.SliceEmpty(t, created, must.Sprint(when, ", registered again by ", bin, ": nothing runs again"))
		if !newVersion {
			must.EqOp(t, v, e.version(id), must.Sprint(when, ", registered again by ", bin, ": no new version"))
		}
	}
	again(cliBin, "one completed, two run", false)
	again(nomadBin, "one completed, two run", true)
	must.True(t, e.keptRunning(running[0]) && e.keptRunning(running[1]), must.Sprint("the two running allocations are kept"))
	must.EqOp(t, 2, e.count(id), must.Sprint("the pinned version counts what is left to run"))
	again(cliBin, "one completed, two run, count lowered", false)
	must.True(t, e.keptRunning(running[0]) && e.keptRunning(running[1]), must.Sprint("the two running allocations are kept"))
	must.NoError(t, os.WriteFile(done, nil, 0o644))
	e.eventually(liveness, id+"'s allocations to end", func() bool {
		_, r := e.byStatus(id)
		return len(r) == 0
	})
	e.quiet(id, s)
	// the job declares no run time: its three runs, each finished on its
	// own, are what the next run of it is expected to take
	var st struct {
		Groups []struct {
			Expected *struct {
				Seconds float64
				Source  string
				Runs    int
			} `json:"expected_runtime"`
		}
	}
	e.eventually(liveness, id+"'s run time learned from its three runs", func() bool {
		return getJSON(s.http+"/v1/jobs/"+id, &st) == nil && len(st.Groups) == 1 && st.Groups[0].Expected != nil &&
			st.Groups[0].Expected.Source == "learned" && st.Groups[0].Expected.Runs == 3
	})
	must.Positive(t, st.Groups[0].Expected.Seconds)
	again(nomadBin, "all ended", true)
	again(cliBin, "all ended", false)
	e.stopJobs(id)
}

// count is the count of job id's group g in Nomad.
func (e *env) count(id string) int {
	j, _, err := e.nomad.Jobs().Info(id, nil)
	must.NoError(e.t, err)
	return *j.TaskGroups[0].Count
}

// oneCompleteTwoRun waits until one allocation of job id completed and two
// run, and returns the two.
func (e *env) oneCompleteTwoRun(id string) []string {
	var running []string
	e.eventually(liveness, id+": index 0 complete, two running", func() bool {
		stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
		if err != nil {
			return false
		}
		complete := 0
		running = nil
		for _, a := range stubs {
			switch {
			case a.ClientStatus == api.AllocClientStatusComplete:
				complete++
			case a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun:
				running = append(running, a.ID)
			}
		}
		return complete == 1 && len(running) == 2
	})
	return running
}
