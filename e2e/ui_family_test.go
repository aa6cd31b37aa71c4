package e2e

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The page, in a browser, on the workflow examples (issue 47 point 8): a
// child dispatched from the parameterized infer shows the node and GPU its
// own allocation ran on, not its parent's whole pool (one GPU on each
// node), and names its parent; infer's page lists the child with its
// state; nightly's page lists the child a forced launch made.
func TestWebUIShowsAJobsFamily(t *testing.T) {
	bin := chromium(t)
	e := newEnv(t)
	sched := e.startScheduler("s1", "")
	dir := filepath.Join("..", "jobspecs", "examples", "workflows")
	for _, name := range []string{"dispatch-infer", "periodic-nightly"} {
		out, err := exec.Command(cliBin, "job", "run", "-address", e.c.Address(), "-timeout", liveness.String(), filepath.Join(dir, name+".nomad.hcl")).CombinedOutput()
		must.NoError(t, err, must.Sprintf("gpushare job run %s:\n%s", name, out))
	}
	var pool *pin.Record
	e.eventually(liveness, "infer to be pinned to a pool", func() bool {
		j, _, err := e.nomad.Jobs().Info("infer", nil)
		if err != nil || len(pin.Gated(j)) > 0 {
			return false
		}
		rec, ok := pin.ParseRecord(j, "g")
		pool = rec
		return ok
	})
	must.Greater(t, 1, len(pool.Nodes), must.Sprint("a pool of more than one node: the child's page must not show the others"))
	resp, _, err := e.nomad.Jobs().Dispatch("infer", map[string]string{"input": "page"}, nil, "", nil)
	must.NoError(t, err)
	child := resp.DispatchedJobID
	var alloc *api.Allocation
	e.eventually(liveness, "the dispatched child to run to completion", func() bool {
		stubs, _, err := e.nomad.Jobs().Allocations(child, true, nil)
		if err != nil {
			return false
		}
		for _, s := range stubs {
			if s.ClientStatus == "complete" {
				alloc, _, err = e.nomad.Allocations().Info(s.ID, nil)
				return err == nil
			}
		}
		return false
	})
	_, _, err = e.nomad.Jobs().PeriodicForce("nightly", nil)
	must.NoError(t, err)
	var launched string
	e.eventually(liveness, "a forced child of nightly", func() bool {
		jobs, _, err := e.nomad.Jobs().PrefixList("nightly/periodic-")
		if err != nil || len(jobs) == 0 {
			return false
		}
		launched = jobs[0].ID
		return true
	})

	// the scheduler's model has both children, the dispatched one done
	e.eventually(liveness, "the scheduler to see the dispatched child done and the launched child", func() bool {
		var done, kid service.JobStatus
		return getJSON(sched.http+"/v1/jobs/"+url.PathEscape(child)+"?namespace=default", &done) == nil && len(done.Groups) == 1 &&
			done.Groups[0].Lifecycle == "done" &&
			getJSON(sched.http+"/v1/jobs/"+url.PathEscape(launched)+"?namespace=default", &kid) == nil
	})

	names := map[string]string{} // node ID -> name
	for _, id := range pool.Nodes {
		n, _, err := e.nomad.Nodes().Info(id, nil)
		must.NoError(t, err)
		names[id] = n.Name
	}
	shares := model.Shares(alloc)
	must.SliceNotEmpty(t, shares)
	page := browse(t, bin, sched.http+"/ui/jobs/"+url.PathEscape(child)+"?namespace=default", "--dump-dom")
	must.StrContains(t, page, `A child dispatched from the parameterized job <a href="/ui/jobs/infer?namespace=default">infer</a> into its pool of GPUs`, must.Sprint(page))
	must.StrContains(t, page, fmt.Sprintf(`on node %s: <span class="gpu-name" title="%s">`, names[alloc.NodeID], model.GPUOf(shares[0])))
	must.StrContains(t, page, fmt.Sprintf("(%d shares) <span class=\"quiet\">(complete)</span>", len(shares)))
	for id, name := range names {
		if id != alloc.NodeID {
			must.StrNotContains(t, page, "node "+name, must.Sprint("another node of the pool is not where the child ran"))
		}
	}

	parent := browse(t, bin, sched.http+"/ui/jobs/infer?namespace=default", "--dump-dom")
	must.StrContains(t, parent, "<h2>Children</h2>")
	at := strings.Index(parent, fmt.Sprintf(`<a href="/ui/jobs/%s?namespace=default">%s</a>`, url.PathEscape(child), child))
	must.Positive(t, at, must.Sprint(parent))
	must.StrContains(t, parent[at:], "1 complete")

	nightly := browse(t, bin, sched.http+"/ui/jobs/nightly?namespace=default", "--dump-dom")
	must.StrContains(t, nightly, "placed by gpushare as it comes.")
	must.StrContains(t, nightly, fmt.Sprintf(`<a href="/ui/jobs/%s?namespace=default">%s</a>`, url.PathEscape(launched), launched), must.Sprint(nightly))
	kid := browse(t, bin, sched.http+"/ui/jobs/"+url.PathEscape(launched)+"?namespace=default", "--dump-dom")
	must.StrContains(t, kid, `A child launched by <a href="/ui/jobs/nightly?namespace=default">nightly</a>.`)
}
