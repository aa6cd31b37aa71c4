package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// On a cluster with ACLs and http_require_token, the scheduler's API asks
// Nomad what the caller's token may read: a token with read-job in team-a
// only (not list-jobs: read-job is what Nomad itself asks to read a job)
// reads team-a's job and sees team-a's waiting group, and nothing of
// team-b's anywhere; without a token nothing is listed, not even which
// namespaces the scheduler manages.
func TestSchedulerAPIAuthorisesWithNomad(t *testing.T) {
	e := newEnvWith(t, devcluster.Options{ACL: true})
	for _, ns := range []string{"team-a", "team-b"} {
		_, err := e.nomad.Namespaces().Register(&api.Namespace{Name: ns}, nil)
		must.NoError(t, err)
	}
	e.nomadHCL = fmt.Sprintf("  token = %q\n  namespaces = [\"team-a\", \"team-b\"]\n", e.c.ManagementToken())
	s := e.startScheduler("s", "http_require_token = true\n")
	e.eventually(30*time.Second, "the scheduler to lead", s.leader)

	for _, j := range []struct{ id, ns string }{{"job-a", "team-a"}, {"job-b", "team-b"}} {
		job := e.parse(j.id, map[string]any{"shares": 100000}) // larger than any node: refused, listed
		job.Namespace = ptr(j.ns)
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
	}
	must.NoError(t, e.c.ApplyPolicy("reader-a", "read-job in team-a only", `namespace "team-a" { capabilities = ["read-job"] }`))
	reader, err := e.c.CreateToken("reader-a", "reader-a")
	must.NoError(t, err)
	ops := e.c.ManagementToken()

	get := func(path, token string) (int, string) {
		req, err := http.NewRequest("GET", s.http+path, nil)
		must.NoError(t, err)
		if token != "" {
			req.Header.Set("X-Nomad-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		must.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	groupsFor := func(token string) []string {
		code, body := get("/v1/groups", token)
		must.EqOp(t, 200, code, must.Sprint(body))
		var gs []struct{ Namespace, Job string }
		must.NoError(t, json.Unmarshal([]byte(body), &gs))
		var out []string
		for _, g := range gs {
			out = append(out, g.Namespace+"/"+g.Job)
		}
		return out
	}
	e.eventually(30*time.Second, "both groups to be listed", func() bool { return len(groupsFor(ops)) == 2 })

	must.Eq(t, []string{"team-a/job-a"}, groupsFor(reader))
	for _, c := range []struct {
		path, token string
		code        int
	}{
		{"/v1/jobs/job-a?namespace=team-a", reader, 200},
		{"/v1/jobs/job-b?namespace=team-b", reader, 403},
		{"/v1/jobs/job-b?namespace=team-b", ops, 200},
		{"/v1/jobs/job-a?namespace=team-a", "", 401},
		{"/v1/jobs/job-a?namespace=team-a", "00000000-0000-0000-0000-000000000000", 401},
		{"/v1/jobs/x?namespace=elsewhere", "", 401},
		{"/v1/groups", "", 401},
		{"/v1/unpairs", "", 401},
		{"/v1/health", "", 200},
	} {
		code, body := get(c.path, c.token)
		must.EqOp(t, c.code, code, must.Sprintf("GET %s: %s", c.path, body))
		if c.token == "" && c.code == 401 {
			must.StrNotContains(t, body, "team-", must.Sprint("an anonymous caller learnt of the namespaces"))
		}
	}
}
