package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

// TestExampleJobspecs runs the example jobspecs through `gpushare job
// run` against a cluster with the scheduler, and checks `gpushare status`:
// the raw_exec ones always, the exec one when the clients offer the exec
// driver (root with cgroups). The docker one (NVIDIA container runtime) is
// only linted (jobspecs.TestExamplesAreClean): no Docker here.
func TestExampleJobspecs(t *testing.T) {
	e := newEnv(t)
	sched := e.startScheduler("s1", "")
	names := jobspecs.DemoExampleNames()
	if e.offersDriver("exec") {
		for _, name := range jobspecs.ExampleNames() {
			if drivers, err := jobspecs.ExampleDrivers(name); err == nil && slices.Equal(drivers, []string{"exec"}) {
				names = append(names, name)
			}
		}
	} else {
		t.Log("the clients offer no exec driver (it needs root and cgroups): the exec example is not run")
	}
	for _, name := range names {
		path := filepath.Join("..", "jobspecs", name)
		out, err := exec.Command(cliBin, "job", "run", "-address", e.c.Address(), "-timeout", liveness.String(), path).CombinedOutput()
		must.NoError(t, err, must.Sprintf("gpushare job run %s:\n%s", name, out))
		must.StrContains(t, string(out), "fits now", must.Sprintf("%s", out))
		t.Logf("gpushare job run %s:\n%s", name, out)
	}
	// every example is pinned, none waits at the gate
	jobs, _, err := e.nomad.Jobs().List(nil)
	must.NoError(t, err)
	must.SliceLen(t, len(names), jobs)
	for _, stub := range jobs {
		job, _, err := e.nomad.Jobs().Info(stub.ID, nil)
		must.NoError(t, err)
		must.SliceEmpty(t, pin.Gated(job), must.Sprintf("job %s", stub.ID))
	}
	out, err := exec.Command(cliBin, "status", "-address", e.c.Address(), "-scheduler", sched.http).CombinedOutput()
	must.NoError(t, err)
	must.StrContains(t, string(out), "no group waits for gpushare")
	must.StrContains(t, string(out), "train-pair/trainer")
	must.StrContains(t, string(out), "inference/api")
	t.Logf("gpushare status:\n%s", out)

	// re-running an unchanged jobspec keeps its placement: no new decision
	before := e.version("train-pair")
	out, err = exec.Command(cliBin, "job", "run", "-address", e.c.Address(), "-detach", filepath.Join("..", "jobspecs", "examples", "training-nvlink-pair.nomad.hcl")).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "kept the existing placement of trainer")
	time.Sleep(2 * time.Second)
	job, _, err := e.nomad.Jobs().Info("train-pair", nil)
	must.NoError(t, err)
	must.SliceEmpty(t, pin.Gated(job))
	must.True(t, *job.Version <= before+1, must.Sprintf("version went from %d to %d", before, *job.Version))
	must.False(t, strings.Contains(string(out), "does not fit"))

	// a finished batch job run again unchanged would run nothing: said, exit 1
	e.eventually(time.Minute, "batch-half to complete", func() bool {
		j, _, err := e.nomad.Jobs().Info("batch-half", nil)
		return err == nil && *j.Status == "dead"
	})
	out, err = exec.Command(cliBin, "job", "run", "-address", e.c.Address(), "-detach", filepath.Join("..", "jobspecs", "examples", "batch-half.nomad.hcl")).CombinedOutput()
	must.Error(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "batch job that already completed")

	// a request no node of the cluster could ever hold is refused before
	// it is registered, with -check too
	huge := filepath.Join(t.TempDir(), "huge.nomad.hcl")
	must.NoError(t, os.WriteFile(huge, []byte(`job "huge" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpushare" {
          count = 1600
        }
      }
    }
  }
}
`), 0o644))
	for _, args := range [][]string{{"-check"}, {"-detach"}} {
		cmd := exec.Command(cliBin, append(append([]string{"job", "run", "-address", e.c.Address()}, args...), huge)...)
		out, err = cmd.CombinedOutput()
		must.Error(t, err, must.Sprintf("job run %v of a 16-GPU group:\n%s", args, out))
		must.StrContains(t, string(out), "can never be placed on this cluster")
		must.StrContains(t, string(out), "the largest node has 8")
	}
	_, _, err = e.nomad.Jobs().Info("huge", nil)
	must.Error(t, err) // never registered
}

// offersDriver reports whether a node of the cluster offers the task driver
// (detected and healthy), waiting for drivers to fingerprint: false at once
// when every node has fingerprinted it as absent, else waiting up to the
// liveness bound (a loaded machine fingerprints late, it does not lack the
// driver). Only root gets exec (and java); raw_exec is enabled on every
// client.
func (e *env) offersDriver(name string) bool {
	if name != "raw_exec" && os.Geteuid() != 0 {
		return false
	}
	deadline := time.Now().Add(liveness)
	for {
		nodes, _, err := e.nomad.Nodes().List(nil)
		must.NoError(e.t, err)
		absent := len(nodes) > 0
		for _, n := range nodes {
			d := n.Drivers[name]
			if d != nil && d.Detected && d.Healthy {
				return true
			}
			absent = absent && d != nil && !d.Detected
		}
		if absent || time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}
