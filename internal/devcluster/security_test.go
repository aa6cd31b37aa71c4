package devcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"

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
