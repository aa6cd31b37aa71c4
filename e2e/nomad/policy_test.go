package nomad

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/nomad/acl"
	"github.com/shoenig/test/must"
)

// The shipped scheduler policy parses with Nomad's own parser and grants
// exactly what the scheduler calls: jobs, allocations and the event stream
// of every namespace, re-registering, scaling (elastic groups) and
// stopping allocations, nodes and their stats, and its variables (the
// leader lock and its records under gpushare/ in the gpushare namespace),
// but not deregistering, purging, reading logs or secrets, or writing
// other variables.
func TestSchedulerPolicy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nomad", "gpushare-scheduler.policy.hcl"))
	must.NoError(t, err)
	p, err := acl.Parse(string(b), acl.PolicyParseStrict)
	must.NoError(t, err)
	a, err := acl.NewACL(false, []*acl.Policy{p})
	must.NoError(t, err)
	for _, ns := range []string{"default", "team-a", "gpushare"} {
		for _, op := range []string{acl.NamespaceCapabilityListJobs, acl.NamespaceCapabilityReadJob, acl.NamespaceCapabilityRegisterJob, acl.NamespaceCapabilityAllocLifecycle,
			acl.NamespaceCapabilityScaleJob} { // elastic groups (gpushare.elastic)
			must.True(t, a.AllowNsOp(ns, op), must.Sprintf("%s in %s", op, ns))
		}
		for _, op := range []string{acl.NamespaceCapabilitySubmitJob, acl.NamespaceCapabilityDeregisterJob, acl.NamespaceCapabilityPurgeJob,
			acl.NamespaceCapabilityReadLogs, acl.NamespaceCapabilityAllocExec, acl.NamespaceCapabilityDispatchJob} {
			must.False(t, a.AllowNsOp(ns, op), must.Sprintf("%s in %s", op, ns))
		}
	}
	must.True(t, a.AllowNodeRead())
	must.False(t, a.AllowNodeWrite())
	must.False(t, a.AllowAgentRead())
	must.False(t, a.AllowOperatorRead())
	must.True(t, a.AllowVariableOperation("gpushare", "gpushare/leader", acl.VariablesCapabilityWrite, nil))
	for _, op := range []string{acl.VariablesCapabilityRead, acl.VariablesCapabilityWrite, acl.VariablesCapabilityDestroy} {
		must.True(t, a.AllowVariableOperation("gpushare", "gpushare/state/pins-00", op, nil), must.Sprint(op))
	}
	must.False(t, a.AllowVariableOperation("gpushare", "nomad/jobs/x", acl.VariablesCapabilityWrite, nil))
	must.False(t, a.AllowVariableOperation("default", "gpushare/leader", acl.VariablesCapabilityWrite, nil))
	must.False(t, a.AllowVariableOperation("team-a", "gpushare/leader", acl.VariablesCapabilityWrite, nil))
}
