package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// policyFile is the ACL policy the repository ships for the scheduler.
var policyFile = filepath.Join("..", "deploy", "nomad", "gpushare-scheduler.policy.hcl")

// The cluster runs with ACLs. A scheduler whose token has only the shipped
// policy takes the leader lock, follows the event stream and pins a gated
// job, which runs. A scheduler whose policy lacks register-job says so,
// naming the policy file, and the group waits with that reason.
func TestSchedulerWithACLs(t *testing.T) {
	e := newEnvWith(t, devcluster.Options{ACL: true})
	must.NotEq(t, "", e.c.ManagementToken())
	// the scheduler's own namespace, which the shipped policy names
	_, err := e.nomad.Namespaces().Register(&api.Namespace{Name: "gpushare"}, nil)
	must.NoError(t, err)
	must.NoError(t, e.c.ApplyPolicyFile("gpushare-scheduler", policyFile))
	token, err := e.c.CreateToken("gpushare", "gpushare-scheduler")
	must.NoError(t, err)

	// the token is not a management token: it cannot deregister a job
	// (nor can a request without one list jobs)
	limited, err := api.NewClient(&api.Config{Address: e.c.Address(), SecretID: token})
	must.NoError(t, err)
	_, _, err = limited.Jobs().Deregister("nothing", false, nil)
	must.ErrorContains(t, err, "Permission denied")
	anon, err := api.NewClient(&api.Config{Address: e.c.Address()})
	must.NoError(t, err)
	_, _, err = anon.Jobs().List(nil)
	must.ErrorContains(t, err, "Permission denied")

	tokenFile := filepath.Join(e.dir, "token")
	must.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	e.nomadHCL = fmt.Sprintf("  token_file = %q\n  namespace = \"gpushare\"\n", tokenFile)
	s1 := e.startScheduler("s1", "")
	e.eventually(30*time.Second, "s1 to lead", s1.leader)
	e.register("acl-quarter", map[string]any{"shares": 25})
	a := e.running("acl-quarter", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	job, _, err := e.nomad.Jobs().Info("acl-quarter", nil)
	must.NoError(t, err)
	_, ok := pin.ParseRecord(job, "g")
	must.True(t, ok, must.Sprint("the job carries no placement record"))
	// a staged pair (two one-GPU allocations allowed one node): the hold
	// is registered, and let go, with the policy's register-job alone
	pair := e.parse("acl-pair", map[string]any{"shares": 100, "count": 2})
	pair.TaskGroups[0].Constraints = append(pair.TaskGroups[0].Constraints, &api.Constraint{LTarget: "${node.unique.name}", RTarget: "pcie", Operand: "="})
	_, _, err = e.nomad.Jobs().Register(pair, nil)
	must.NoError(t, err)
	both := e.running("acl-pair", 2, 2*time.Minute)
	must.NotEq(t, gpus(both[0]), gpus(both[1]))
	must.SliceNotEmpty(t, e.holdJobs(), must.Sprint("staged behind a hold"))
	e.eventually(2*time.Minute, "the hold to be let go", func() bool { return len(e.liveHoldJobs()) == 0 })
	s1.proc.Stop()

	// the same policy without register-job
	b, err := os.ReadFile(policyFile)
	must.NoError(t, err)
	rules := regexp.MustCompile(`"register-job",\s*`).ReplaceAllString(string(b), "")
	must.StrNotContains(t, rules, "register-job")
	must.NoError(t, e.c.ApplyPolicy("no-register", "the scheduler's policy without register-job", rules))
	token, err = e.c.CreateToken("gpushare-no-register", "no-register")
	must.NoError(t, err)
	e.nomadHCL = fmt.Sprintf("  token = %q\n  namespace = \"gpushare\"\n", token)
	s2 := e.startScheduler("s2", "")
	e.eventually(30*time.Second, "s2 to lead", s2.leader)
	e.register("acl-denied", map[string]any{"shares": 25})
	var reason string
	e.eventually(30*time.Second, "the group to wait for permission", func() bool {
		var st struct {
			Groups []struct{ State, Reason string }
		}
		if getJSON(s2.http+"/v1/jobs/acl-denied", &st) != nil || len(st.Groups) == 0 {
			return false
		}
		reason = st.Groups[0].Reason
		return strings.Contains(reason, "permission denied")
	})
	t.Logf("pending reason: %s", reason)
	must.StrContains(t, reason, "register-job")
	must.StrContains(t, reason, "namespace default")
	must.StrContains(t, reason, "deploy/nomad/gpushare-scheduler.policy.hcl")
	logs, err := os.ReadFile(filepath.Join(e.dir, "s2.log"))
	must.NoError(t, err)
	must.StrContains(t, string(logs), "gpushare-scheduler.policy.hcl")

	// it tries again with backoff (2s, 4s, 8s, ...), not on every pass
	before := metricOf(t, s2, "gpushare_pin_requests_total")
	time.Sleep(6 * time.Second)
	after := metricOf(t, s2, "gpushare_pin_requests_total")
	t.Logf("pin requests refused in 6s: %d; log lines naming the policy: %d", after-before, strings.Count(string(readFile(t, filepath.Join(e.dir, "s2.log"))), "gpushare-scheduler.policy.hcl"))
	must.LessEq(t, 2, after-before)
	job, _, err = e.nomad.Jobs().Info("acl-denied", nil)
	must.NoError(t, err)
	must.SliceLen(t, 1, pin.Gated(job), must.Sprint("the job was pinned without register-job"))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must.NoError(t, err)
	return b
}
