package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TLS are the PEM files of a cluster that speaks TLS on HTTP and RPC.
type TLS struct {
	// CAFile is the certificate of the CA that signed the others.
	CAFile string
	// AgentCert and AgentKey are every agent's certificate: server and
	// client, for 127.0.0.1, localhost, server.global.nomad and
	// client.global.nomad.
	AgentCert, AgentKey string
	// ClientCert and ClientKey are an API caller's certificate, which the
	// agents require on HTTPS (verify_https_client).
	ClientCert, ClientKey string
}

// GenerateTLS writes a fresh CA, an agent certificate and an API client
// certificate (ECDSA P-256, valid for a day) into dir.
func GenerateTLS(dir string) (*TLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpushare devcluster CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	t := &TLS{
		CAFile:    filepath.Join(dir, "ca.pem"),
		AgentCert: filepath.Join(dir, "agent.pem"), AgentKey: filepath.Join(dir, "agent-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	if err := writePEM(t.CAFile, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}
	agent := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "server.global.nomad"},
		DNSNames:     []string{"localhost", "server.global.nomad", "client.global.nomad"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := issue(agent, ca, caKey, t.AgentCert, t.AgentKey); err != nil {
		return nil, err
	}
	client := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "gpushare"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(client, ca, caKey, t.ClientCert, t.ClientKey); err != nil {
		return nil, err
	}
	return t, nil
}

// issue signs tmpl with the CA and writes the certificate and a new key.
func issue(tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.NotBefore, tmpl.NotAfter = ca.NotBefore, ca.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(keyPath, "EC PRIVATE KEY", keyDER, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// securityConfig is the HCL of the acl and tls blocks every agent gets.
func securityConfig(o Options) string {
	var b strings.Builder
	if o.ACL {
		b.WriteString("acl {\n  enabled = true\n}\n")
	}
	if o.TLS != nil {
		fmt.Fprintf(&b, "tls {\n  http = true\n  rpc = true\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  verify_server_hostname = true\n  verify_https_client = true\n}\n",
			o.TLS.CAFile, o.TLS.AgentCert, o.TLS.AgentKey)
	}
	return b.String()
}

// apiConfig is the configuration of the cluster's own API client.
func apiConfig(addr string, o Options) *api.Config {
	cfg := &api.Config{Address: addr}
	if o.TLS != nil {
		cfg.TLSConfig = &api.TLSConfig{CACert: o.TLS.CAFile, ClientCert: o.TLS.ClientCert, ClientKey: o.TLS.ClientKey}
	}
	return cfg
}

// bootstrap creates the management token of an ACL cluster once its server
// leads, and gives it to the cluster's API client. It reports whether the
// cluster has its token now.
func (c *Cluster) bootstrap() bool {
	if !c.opts.ACL || c.token != "" {
		return true
	}
	tok, _, err := c.client.ACLTokens().Bootstrap(nil)
	if err != nil {
		return false
	}
	c.token = tok.SecretID
	c.client.SetSecretID(tok.SecretID)
	return true
}

// ManagementToken is the secret of the bootstrap token of an ACL cluster
// (empty without ACLs).
func (c *Cluster) ManagementToken() string { return c.token }

// ApplyPolicy creates or updates the ACL policy name with the given rules
// (Nomad ACL policy HCL).
func (c *Cluster) ApplyPolicy(name, description, rules string) error {
	if !c.opts.ACL {
		return errors.New("the cluster runs without ACLs")
	}
	_, err := c.client.ACLPolicies().Upsert(&api.ACLPolicy{Name: name, Description: description, Rules: rules}, nil)
	if err != nil {
		return fmt.Errorf("applying ACL policy %s: %w", name, err)
	}
	return nil
}

// ApplyPolicyFile applies the policy in file under name.
func (c *Cluster) ApplyPolicyFile(name, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return c.ApplyPolicy(name, "applied from "+filepath.Base(file), string(b))
}

// CreateToken creates a client token with exactly the given policies and
// returns its secret.
func (c *Cluster) CreateToken(name string, policies ...string) (string, error) {
	if !c.opts.ACL {
		return "", errors.New("the cluster runs without ACLs")
	}
	tok, _, err := c.client.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: policies}, nil)
	if err != nil {
		return "", fmt.Errorf("creating ACL token %s: %w", name, err)
	}
	return tok.SecretID, nil
}
