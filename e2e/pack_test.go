package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/internal/nomadpack"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The nomad-pack pack (deploy/pack/gpushare_scheduler), rendered as
// nomad-pack renders it with a customised set of variables (two replicas
// in a namespace of their own, gpu-sched, not the default gpushare), runs
// on a cluster with ACLs: its rendered namespace specification
// (nomad namespace apply) and policy, whose named namespace block names
// gpu-sched, give the token in the job's variable what the scheduler
// needs there, so one replica takes the leader lock in gpu-sched and
// answers /v1/health as the synced leader, and the other as a follower.
func TestPackOnACLCluster(t *testing.T) {
	start := time.Now()
	e := newEnvWith(t, devcluster.Options{ACL: true})
	const ns, job = "gpu-sched", "gpushare-scheduler"
	p, err := nomadpack.Load(filepath.Join("..", "deploy", "pack", "gpushare_scheduler"))
	must.NoError(t, err)
	r, err := p.Render(fmt.Sprintf("namespace = %q\ncount = 2\ngpushare_bin = %q\nnomad_addr = %q\nlog_level = \"debug\"\nleader_ttl = \"10s\"\nleader_lock_delay = \"1s\"\n",
		ns, cliBin, e.c.Address()))
	must.NoError(t, err)

	// the namespace and the policy, as the pack's README says
	dir := t.TempDir()
	nsFile := filepath.Join(dir, "gpushare_scheduler.namespace.hcl")
	must.NoError(t, os.WriteFile(nsFile, []byte(r.Aux["templates/gpushare_scheduler.namespace.hcl.tpl"]), 0o644))
	apply := exec.Command(nomadBin, "namespace", "apply", nsFile)
	apply.Env = append(os.Environ(), "NOMAD_ADDR="+e.c.Address(), "NOMAD_TOKEN="+e.c.ManagementToken())
	out, err := apply.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.NoError(t, e.c.ApplyPolicy("gpushare-scheduler", "gpushare scheduler", r.Aux["templates/gpushare_scheduler.policy.hcl.tpl"]))
	token, err := e.c.CreateToken("gpushare", "gpushare-scheduler")
	must.NoError(t, err)
	_, _, err = e.nomad.Variables().Create(&api.Variable{
		Namespace: ns,
		Path:      "nomad/jobs/" + job,
		Items:     api.VariableItems{"token": token},
	}, nil)
	must.NoError(t, err)

	// the job, as nomad-pack run submits it
	j, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.Jobs["templates/gpushare_scheduler.nomad.tpl"], Canonicalize: true})
	must.NoError(t, err)
	must.Eq(t, job, *j.ID)
	must.Eq(t, ns, *j.Namespace)
	must.Eq(t, 2, *j.TaskGroups[0].Count)
	must.SliceEmpty(t, pin.Gated(j), must.Sprint("the scheduler's own job is gated"))
	_, _, err = e.nomad.Jobs().Register(j, nil)
	must.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			dumpAllocLogs(t, e, ns, job, "scheduler")
		}
	})

	allocs := e.runningIn(ns, job, 2, 60*time.Second)
	must.NotEq(t, allocs[0].NodeID, allocs[1].NodeID, must.Sprint("replicas on the same client"))
	var replicas []string
	for _, a := range allocs {
		replicas = append(replicas, httpOf(t, a))
	}
	t.Logf("replicas at %v (%s after start)", replicas, time.Since(start).Round(time.Millisecond))
	type health struct{ Leader, Synced bool }
	e.eventually(30*time.Second, "one replica to lead, synced, and the other to follow", func() bool {
		leaders, followers := 0, 0
		for _, r := range replicas {
			var h health
			if getJSON(r+"/v1/health", &h) != nil {
				return false
			}
			switch {
			case h.Leader && h.Synced:
				leaders++
			case !h.Leader:
				followers++
			}
		}
		return leaders == 1 && followers == 1
	})
	// the leader lock is in the pack's namespace
	locks, _, err := e.nomad.Variables().PrefixList("gpushare/", &api.QueryOptions{Namespace: ns})
	must.NoError(t, err)
	must.SliceNotEmpty(t, locks, must.Sprintf("no gpushare/ variable in %s", ns))
	// and the job registers the service the CLI looks for
	e.eventually(15*time.Second, "two registrations of the service gpushare-scheduler", func() bool {
		regs, _, err := e.nomad.Services().Get("gpushare-scheduler", &api.QueryOptions{Namespace: ns})
		return err == nil && len(regs) == 2
	})

	_, _, err = e.nomad.Jobs().Deregister(job, true, &api.WriteOptions{Namespace: ns})
	must.NoError(t, err)
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}
