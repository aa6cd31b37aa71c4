package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// nomadCLI runs Nomad's own CLI (bin/nomad) against the cluster and
// returns its exit status and output.
func (e *env) nomadCLI(args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(nomadBin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.c.Address())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	e.t.Fatalf("nomad %s: %v", strings.Join(args, " "), err)
	return 0, ""
}

// What docs/users.md and docs/troubleshooting.md warn of ("Nomad's CLI
// on gated jobs"), on the real Nomad CLI under node pins: `nomad job
// periodic force` of a gated periodic job exits 2 and says "failed to
// place" (the child is gated: no node satisfies the gate until the
// scheduler pins it), yet the child is then pinned and completes; with
// -detach it exits 0. `nomad job scale` past the group's pin (placed at
// once inside the node pin's room) exits 1 when its monitor sees the
// scheduler's new pin, a newer version of the job, cancel the scale's
// deployment (0 if that deployment succeeded first); either way the
// group is then pinned for, and runs, the new count.
func TestNomadCLIOnGatedJobs(t *testing.T) {
	e := newPCIeEnvWith(t, "gpushare-nomadcli-", 100, fmt.Sprintf("device_groups = %q", devicefn.DeviceGroupsGPU), "dc1", "dc1")
	e.startScheduler("s1", "")

	t.Run("periodic force", func(t *testing.T) {
		e := e.in(t)
		p := e.parse("nightly", map[string]any{"shares": 25})
		p.Type = ptr("batch")
		p.Periodic = &api.PeriodicConfig{Enabled: ptr(true), SpecType: ptr("cron"), Spec: ptr("0 3 1 1 *"), ProhibitOverlap: ptr(false)}
		p.Update, p.TaskGroups[0].Update, p.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		_, _, err := e.nomad.Jobs().Register(p, nil)
		must.NoError(t, err)
		code, out := e.nomadCLI("job", "periodic", "force", "nightly")
		t.Logf("nomad job periodic force nightly: exit %d\n%s", code, out)
		must.EqOp(t, 2, code, must.Sprint("nomad job periodic force of a gated job"))
		must.StrContains(t, out, "failed to place")
		// a forced child is named by its launch's second: a second force
		// within the same second would register the first child again
		for forced := time.Now().Unix(); time.Now().Unix() == forced; {
			time.Sleep(50 * time.Millisecond)
		}
		code, out = e.nomadCLI("job", "periodic", "force", "-detach", "nightly")
		must.EqOp(t, 0, code, must.Sprint(out))
		e.eventually(liveness, "both children of nightly to be pinned and to run or complete", func() bool {
			jobs, _, err := e.nomad.Jobs().PrefixList("nightly/periodic-")
			if err != nil || len(jobs) != 2 {
				return false
			}
			for _, j := range jobs {
				allocs, _, err := e.nomad.Jobs().Allocations(j.ID, false, nil)
				if err != nil || !hasRunOrCompleted(allocs) {
					return false
				}
			}
			return true
		})
		t.Logf("both forced children were placed by the scheduler and ran")
	})

	t.Run("scale past the pin", func(t *testing.T) {
		e := e.in(t)
		e.register("web", map[string]any{"shares": 100})
		e.settled("web", 1)
		code, out := e.nomadCLI("job", "scale", "web", "g", "3")
		t.Logf("nomad job scale web g 3 (past its pin of 1 whole GPU): exit %d\n%s", code, out)
		if code != 0 {
			// the monitor followed the scale's deployment, which the
			// scheduler's new pin (a newer version) cancelled
			must.EqOp(t, 1, code)
			must.StrContains(t, out, "Cancelled due to newer version of job")
		}
		e.settled("web", 3)
		job, _, err := e.nomad.Jobs().Info("web", nil)
		must.NoError(t, err)
		rec, ok := pin.ParseRecord(job, "g")
		must.True(t, ok)
		must.EqOp(t, 3, rec.Count, must.Sprint("the scheduler pinned the group again for 3"))
		t.Logf("then 3 run: the scheduler pinned the group again for 3 (job version %d)", *job.Version)
	})
}

func hasRunOrCompleted(allocs []*api.AllocationListStub) bool {
	for _, a := range allocs {
		if a.ClientStatus == "running" || a.ClientStatus == "complete" {
			return true
		}
	}
	return false
}
