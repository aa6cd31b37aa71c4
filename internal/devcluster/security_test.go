package devcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/nomad/acl"
	"github.com/shoenig/test/must"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	must.NoError(t, err)
	blk, _ := pem.Decode(b)
	must.NotNil(t, blk)
	c, err := x509.ParseCertificate(blk.Bytes)
	must.NoError(t, err)
	return c
}

// The generated agent certificate is valid for every name an agent or API
// caller checks, and the client certificate for client authentication,
// both under the generated CA.
func TestGenerateTLS(t *testing.T) {
	files, err := GenerateTLS(t.TempDir())
	must.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, files.CAFile))
	agent := readCert(t, files.AgentCert)
	for _, name := range []string{"127.0.0.1", "localhost", "server.global.nomad", "client.global.nomad"} {
		_, err := agent.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		must.NoError(t, err, must.Sprintf("agent certificate for %s", name))
	}
	_, err = agent.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	must.NoError(t, err)
	_, err = readCert(t, files.ClientCert).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	must.NoError(t, err)
	info, err := os.Stat(files.AgentKey)
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o600), info.Mode().Perm())
}

func TestSecurityConfig(t *testing.T) {
	must.Eq(t, "", securityConfig(Options{}))
	must.StrContains(t, securityConfig(Options{ACL: true}), "acl {\n  enabled = true\n}")
	hcl := securityConfig(Options{TLS: &TLS{CAFile: "/ca.pem", AgentCert: "/a.pem", AgentKey: "/a-key.pem"}})
	for _, want := range []string{`ca_file = "/ca.pem"`, `cert_file = "/a.pem"`, `key_file = "/a-key.pem"`, "http = true", "rpc = true", "verify_server_hostname = true"} {
		must.StrContains(t, hcl, want)
	}
	must.StrNotContains(t, hcl, "acl")
	must.Eq(t, "https://127.0.0.1:1", apiConfig("https://127.0.0.1:1", Options{TLS: &TLS{CAFile: "/ca.pem"}}).Address)
	must.Eq(t, "/ca.pem", apiConfig("", Options{TLS: &TLS{CAFile: "/ca.pem"}}).TLSConfig.CACert)
}

// The shipped scheduler policy parses with Nomad's own parser and grants
// exactly what the scheduler calls: jobs, allocations and the event stream
// of every namespace, re-registering and stopping allocations, nodes and
// their stats, and the leader lock, but not deregistering, purging,
// reading logs or secrets, or writing other variables.
func TestSchedulerPolicy(t *testing.T) {
	root, err := RepoRoot()
	must.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "nomad", "gpushare-scheduler.policy.hcl"))
	must.NoError(t, err)
	p, err := acl.Parse(string(b), acl.PolicyParseStrict)
	must.NoError(t, err)
	a, err := acl.NewACL(false, []*acl.Policy{p})
	must.NoError(t, err)
	for _, ns := range []string{"default", "team-a"} {
		for _, op := range []string{acl.NamespaceCapabilityListJobs, acl.NamespaceCapabilityReadJob, acl.NamespaceCapabilityRegisterJob, acl.NamespaceCapabilityAllocLifecycle} {
			must.True(t, a.AllowNsOp(ns, op), must.Sprintf("%s in %s", op, ns))
		}
		for _, op := range []string{acl.NamespaceCapabilitySubmitJob, acl.NamespaceCapabilityDeregisterJob, acl.NamespaceCapabilityPurgeJob,
			acl.NamespaceCapabilityReadLogs, acl.NamespaceCapabilityAllocExec, acl.NamespaceCapabilityDispatchJob, acl.NamespaceCapabilityScaleJob} {
			must.False(t, a.AllowNsOp(ns, op), must.Sprintf("%s in %s", op, ns))
		}
	}
	must.True(t, a.AllowNodeRead())
	must.False(t, a.AllowNodeWrite())
	must.False(t, a.AllowAgentRead())
	must.False(t, a.AllowOperatorRead())
	// the leader lock and records in the scheduler's own namespace only
	must.True(t, a.AllowVariableOperation("gpushare", "gpushare/leader", acl.VariablesCapabilityWrite, nil))
	for _, op := range []string{acl.VariablesCapabilityRead, acl.VariablesCapabilityWrite, acl.VariablesCapabilityDestroy} {
		must.True(t, a.AllowVariableOperation("gpushare", "gpushare/state/pins-00", op, nil), must.Sprint(op))
	}
	must.False(t, a.AllowVariableOperation("gpushare", "nomad/jobs/x", acl.VariablesCapabilityWrite, nil))
	for _, ns := range []string{"default", "team-a"} {
		must.False(t, a.AllowVariableOperation(ns, "gpushare/leader", acl.VariablesCapabilityWrite, nil), must.Sprint(ns))
	}
}
