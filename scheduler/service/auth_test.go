package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// With http_require_token the API answers only callers whose Nomad ACL
// token may read what they ask: 401 without a token Nomad knows, 403 for
// a namespace (or the nodes) the token may not read.
func TestHTTPRequiresAToken(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{},
		tokens: map[string][]string{"ops": {"*"}, "team-a": {"team-a"}, "nodes": {"nodes"}}}
	for _, j := range []struct{ id, ns string }{{"a1", "team-a"}, {"b1", "team-b"}} {
		job := gated(j.id, 1600) // never fits: both wait
		job.Namespace = ptr(j.ns)
		f.put(job)
	}
	s := withConfig(t, f, func(c *config.Config) { c.HTTPRequireToken = ptr(true) })
	get := func(path, token string) *httptest.ResponseRecorder {
		req := apiRequest("GET", path, nil)
		if token != "" {
			req.Header.Set("X-Nomad-Token", token)
		}
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, req)
		return rr
	}
	cases := []struct {
		path, token string
		code        int
	}{
		{"/v1/jobs/a1?namespace=team-a", "", 401},
		{"/v1/jobs/a1?namespace=team-a", "bogus", 401},
		{"/v1/jobs/a1?namespace=team-a", "team-a", 200},
		{"/v1/jobs/b1?namespace=team-b", "team-a", 403},
		{"/v1/jobs/b1?namespace=team-b", "ops", 200},
		{"/v1/gpus", "team-a", 403},
		{"/v1/gpus", "nodes", 200},
		{"/v1/groups", "", 401},
		{"/v1/groups", "bogus", 401},
		{"/v1/unpairs", "", 401},
		// the VCs and profiles a job may name are the cluster's, not anyone's
		{"/v1/vcs", "", 401},
		{"/v1/vcs", "bogus", 401},
		{"/v1/vcs", "team-a", 200},
		{"/v1/profiles", "", 401},
		{"/v1/profiles", "team-a", 200},
		// nothing is said before authentication, not even which
		// namespaces this scheduler manages
		{"/v1/jobs/x?namespace=elsewhere", "", 401},
		{"/v1/jobs/x?namespace=elsewhere", "team-a", 403},
		{"/v1/jobs/x?namespace=elsewhere", "ops", 404},
		{"/v1/health", "", 200},
	}
	for _, c := range cases {
		rr := get(c.path, c.token)
		must.EqOp(t, c.code, rr.Code, must.Sprintf("GET %s with token %q: %s", c.path, c.token, rr.Body.String()))
	}
	var groups []Waiting
	must.NoError(t, json.Unmarshal(get("/v1/groups", "team-a").Body.Bytes(), &groups))
	must.SliceLen(t, 1, groups) // only team-a's
	must.EqOp(t, "team-a", groups[0].Namespace)
	req := apiRequest("GET", "/v1/jobs/a1?namespace=team-a", nil)
	req.Header.Set("Authorization", "Bearer team-a")
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, req)
	must.EqOp(t, 200, rr.Code)
}

// Listening beyond loopback, the API asks for a token without being told
// to; on loopback it does not.
func TestHTTPBeyondLoopbackRequiresAToken(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, tokens: map[string][]string{"ops": {"*"}}}
	for addr, want := range map[string]int{"0.0.0.0:0": 401, "127.0.0.1:0": 200} {
		s := withConfig(t, f, func(c *config.Config) { c.HTTPAddress = addr })
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/groups", nil))
		must.EqOp(t, want, rr.Code, must.Sprint(addr, rr.Body.String()))
	}
}

// On loopback, a request a proxy forwarded needs the token: a reverse
// proxy on the same host connects from 127.0.0.1 and, with common
// defaults, sends Host 127.0.0.1, so without the check whoever reaches the
// proxy reads the token-less loopback API. A local program's request (no
// proxy's header) still needs none; http_require_token = false is obeyed.
func TestHTTPForwardedOnLoopbackRequiresAToken(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, tokens: map[string][]string{"ops": {"*"}}}
	s := withConfig(t, f, func(c *config.Config) { c.HTTPAddress = "127.0.0.1:0" })
	get := func(s *Service, path, header, value, token string) *httptest.ResponseRecorder {
		req := apiRequest("GET", path, nil)
		if header != "" {
			req.Header.Set(header, value)
		}
		if token != "" {
			req.Header.Set("X-Nomad-Token", token)
		}
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, req)
		return rr
	}
	for _, h := range [][2]string{
		{"Forwarded", "for=203.0.113.7;proto=https"}, {"X-Forwarded-For", "203.0.113.7"}, {"X-Forwarded-Host", "gpushare.example"},
		{"X-Forwarded-Proto", "https"}, {"X-Forwarded-Port", "443"}, {"X-Forwarded-Uri", "/v1/groups"}, {"Via", "1.1 proxy"}, {"X-Real-IP", "203.0.113.7"},
	} {
		for _, path := range []string{"/v1/groups", "/v1/gpus", "/v1/jobs/x", "/v1/vcs"} {
			rr := get(s, path, h[0], h[1], "")
			must.EqOp(t, 401, rr.Code, must.Sprintf("%s: %s forwarded without a token: %s", path, h[0], rr.Body.String()))
			must.EqOp(t, 401, get(s, path, h[0], h[1], "bogus").Code, must.Sprintf("%s: %s with a bad token", path, h[0]))
		}
		must.EqOp(t, 200, get(s, "/v1/groups", h[0], h[1], "ops").Code, must.Sprint(h[0], " with a token Nomad knows"))
		must.EqOp(t, 200, get(s, "/v1/health", h[0], h[1], "").Code, must.Sprint("probes stay open"))
		must.EqOp(t, 200, get(s, "/ui/login", h[0], h[1], "").Code, must.Sprint("the page asks for the token"))
	}
	must.EqOp(t, 200, get(s, "/v1/groups", "", "", "").Code, must.Sprint("a local program needs no token"))
	must.EqOp(t, 303, get(s, "/ui/login", "", "", "").Code, must.Sprint("no form for a local browser"))
	off := withConfig(t, f, func(c *config.Config) { c.HTTPAddress = "127.0.0.1:0"; c.HTTPRequireToken = ptr(false) })
	must.EqOp(t, 200, get(off, "/v1/groups", "X-Forwarded-For", "203.0.113.7", "").Code, must.Sprint("http_require_token = false"))
}

// With http_cert_file and http_key_file the API is served over TLS.
func TestHTTPServesTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	cfg := config.Default()
	cfg.HTTPAddress = "127.0.0.1:0"
	cfg.HTTPCertFile, cfg.HTTPKeyFile = certFile, keyFile
	must.NoError(t, cfg.Validate())
	s, err := newService(cfg, hclog.NewNullLogger(), f, time.Now)
	must.NoError(t, err)
	s.newLocker = func() (locker, error) {
		return &fakeLocker{acquire: fmt.Errorf("acquire conflict %w", api.ErrLockConflict)}, nil
	}
	addr, err := s.Listen()
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://" + addr + "/v1/vcs")
	must.NoError(t, err)
	resp.Body.Close()
	must.EqOp(t, 200, resp.StatusCode)
	plain, err := http.Get("http://" + addr + "/v1/vcs")
	if err == nil {
		plain.Body.Close()
		must.EqOp(t, http.StatusBadRequest, plain.StatusCode) // Go answers plain HTTP on a TLS port with 400
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpushare test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	must.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	cert, err := x509.ParseCertificate(der)
	must.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
