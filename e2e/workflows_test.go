package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestWorkflowExamples runs the workflow examples of the users' guide
// (docs/users.md, jobspecs/examples/workflows/) as the guide and their
// headers say, with gpushare job run and Nomad's own operations, on a dev
// cluster with the scheduler: a rolling update to a new release and a
// scale past the pin, a new release deployed with a canary that is
// promoted automatically, a child dispatched inside its parameterized
// parent's pool, and a periodic child forced while its parent (a
// template) stays at the gate. The services and batch jobs of
// jobspecs/examples/ run in TestExampleJobspecs.
func TestWorkflowExamples(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	dir := filepath.Join("..", "jobspecs", "examples", "workflows")
	run := func(t *testing.T, args ...string) {
		t.Helper()
		out, err := exec.Command(cliBin, append([]string{"job", "run", "-address", e.c.Address(), "-timeout", liveness.String()}, args...)...).CombinedOutput()
		must.NoError(t, err, must.Sprintf("gpushare job run %v:\n%s", args, out))
		t.Logf("gpushare job run %v:\n%s", args, out)
	}
	// release counts the running allocations of a job by their group's
	// meta release, and all of them
	release := func(e *env, id, want string) (n, all int) {
		for _, a := range e.runningNow(id) {
			all++
			if a.Job != nil && a.Job.LookupTaskGroup("api") != nil && a.Job.LookupTaskGroup("api").Meta["release"] == want {
				n++
			}
		}
		return n, all
	}

	t.Run("rolling update and scale", func(t *testing.T) {
		e := e.in(t)
		f := filepath.Join(dir, "service-rolling.nomad.hcl")
		run(t, f)
		e.running("rolling", 2, liveness)
		run(t, "-var", "release=2", f)
		e.eventually(liveness, "the deployment of release 2 to finish, both its allocations running", func() bool {
			d, _, err := e.nomad.Jobs().LatestDeployment("rolling", nil)
			if err != nil || d == nil || d.Status != api.DeploymentStatusSuccessful {
				return false
			}
			n, all := release(e, "rolling", "2")
			return n == 2 && all == 2
		})
		// Nomad refuses to scale a job while a deployment of it is active
		three := 3
		_, _, err := e.nomad.Jobs().Scale("rolling", "api", &three, "e2e: the users' guide's scale", false, nil, nil)
		must.NoError(t, err)
		e.running("rolling", 3, liveness)
		job, _, err := e.nomad.Jobs().Info("rolling", nil)
		must.NoError(t, err)
		must.SliceEmpty(t, pin.Gated(job))
	})

	t.Run("canary", func(t *testing.T) {
		e := e.in(t)
		f := filepath.Join(dir, "service-canary.nomad.hcl")
		run(t, f)
		e.running("canary", 2, liveness)
		// the new release with gpushare job run, as the guide says: it
		// leaves a group deployed with canaries gated (carried, the running
		// pin left the canary no room and the deployment waited for ever)
		run(t, "-detach", "-var", "release=2", f)
		e.eventually(liveness, "the canary deployment of release 2 to be promoted and both allocations of release 2 to run", func() bool {
			d, _, err := e.nomad.Jobs().LatestDeployment("canary", nil)
			if err != nil || d == nil || d.Status != api.DeploymentStatusSuccessful {
				return false
			}
			n, all := release(e, "canary", "2")
			return n == 2 && all == 2
		})
	})

	t.Run("dispatch", func(t *testing.T) {
		e := e.in(t)
		run(t, filepath.Join(dir, "dispatch-infer.nomad.hcl"))
		e.eventually(liveness, "the parameterized parent to be pinned to a pool", func() bool {
			j, _, err := e.nomad.Jobs().Info("infer", nil)
			if err != nil || len(pin.Gated(j)) > 0 {
				return false
			}
			_, ok := pin.ParseRecord(j, "g")
			return ok
		})
		resp, _, err := e.nomad.Jobs().Dispatch("infer", map[string]string{"input": "batch-1"}, nil, "", nil)
		must.NoError(t, err)
		e.eventually(liveness, "the dispatched child to run to completion", func() bool {
			return completed(e, resp.DispatchedJobID)
		})
	})

	t.Run("periodic", func(t *testing.T) {
		e := e.in(t)
		run(t, filepath.Join(dir, "periodic-nightly.nomad.hcl"))
		_, _, err := e.nomad.Jobs().PeriodicForce("nightly", nil)
		must.NoError(t, err)
		e.eventually(liveness, "a forced child of nightly to run to completion", func() bool {
			jobs, _, err := e.nomad.Jobs().PrefixList("nightly/periodic-")
			return err == nil && len(jobs) > 0 && completed(e, jobs[0].ID)
		})
		parent, _, err := e.nomad.Jobs().Info("nightly", nil)
		must.NoError(t, err)
		must.Eq(t, []string{"g"}, pin.Gated(parent), must.Sprint("the parent, a template, is never pinned"))
	})
}

// completed reports whether an allocation of the job completed.
func completed(e *env, id string) bool {
	stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
	return err == nil && slices.ContainsFunc(stubs, func(s *api.AllocationListStub) bool { return s.ClientStatus == "complete" })
}
