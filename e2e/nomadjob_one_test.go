package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The operators' guide's command to run the scheduler as a Nomad job, on a
// cluster of one client: `nomad job run` returns once both replicas are
// healthy (spread over the clients, they share the only one), one leads.
// Before, the replicas had to be on different clients: one waited, and
// `nomad job run` watched the deployment for its full 10 minutes.
func TestSchedulerAsNomadJobOnOneClient(t *testing.T) {
	fx := t.TempDir()
	p, err := fixtures.WriteTo(fixtures.PCIe4GPU, fx)
	must.NoError(t, err)
	c := startClusterWith(t, devcluster.Options{Clients: []devcluster.Client{{Name: "only", Fixture: p}}})
	e := envOn(t, c, map[string]string{"only": p}, "gpushare-one-")
	const ns = "gpushare"
	_, err = e.nomad.Namespaces().Register(&api.Namespace{Name: ns, Description: "the gpushare scheduler"}, nil)
	must.NoError(t, err)

	// the guide's command, with the default count and placement
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // liveness: the deployment's own deadline is 10 minutes
	defer cancel()
	cmd := exec.CommandContext(ctx, nomadBin, "job", "run",
		"-var", "gpushare_bin="+cliBin, "-var", "nomad_addr="+c.Address(),
		"-var", "leader_ttl=10s", "-var", "leader_lock_delay=1s",
		filepath.Join("..", "deploy", "nomad", "gpushare-scheduler.nomad.hcl"))
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+c.Address())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("nomad job run returned after %s:\n%s", time.Since(start).Round(time.Second), out)
	must.NoError(t, err, must.Sprint("nomad job run of the scheduler's job did not come up on one client"))
	t.Cleanup(func() {
		if t.Failed() {
			dumpAllocLogs(t, e, ns, "gpushare-scheduler", "scheduler")
		}
	})

	allocs := e.runningIn(ns, "gpushare-scheduler", 2, time.Minute)
	must.Eq(t, allocs[0].NodeID, allocs[1].NodeID)
	e.eventually(time.Minute, "one replica to lead", func() bool {
		n := 0
		for _, a := range allocs {
			var h struct{ Leader, Synced bool }
			if getJSON(httpOf(t, a)+"/v1/health", &h) == nil && h.Leader && h.Synced {
				n++
			}
		}
		return n == 1
	})
}
