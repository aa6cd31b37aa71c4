package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// A user of an mTLS cluster reaches Nomad with Nomad's own flags or
// variables: the CA to trust, and a client certificate Nomad asks for —
// also when the CLI looks the scheduler's service up in Nomad.
func TestNomadOverMutualTLS(t *testing.T) {
	cleanEnv(t)
	for _, k := range []string{"NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_SKIP_VERIFY", "NOMAD_TLS_SERVER_NAME", "NOMAD_NAMESPACE", "NOMAD_REGION"} {
		t.Setenv(k, "")
	}
	sched := fakeScheduler(t, true, nil)
	su, _ := url.Parse(sched.URL)
	port, _ := strconv.Atoi(su.Port())
	nomad := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/nodes", "/v1/allocations":
			_, _ = w.Write([]byte(`[]`))
		case "/v1/services":
			_ = json.NewEncoder(w).Encode([]map[string]any{{"Namespace": "default", "Services": []map[string]any{{"ServiceName": SchedulerService}}}})
		case "/v1/service/" + SchedulerService:
			_ = json.NewEncoder(w).Encode([]map[string]any{{"ServiceName": SchedulerService, "Namespace": "default", "AllocID": "cccccccc-3", "Address": su.Hostname(), "Port": port}})
		default:
			http.NotFound(w, r)
		}
	}))
	nomad.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	nomad.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the test's
	nomad.StartTLS()
	defer nomad.Close()

	dir := t.TempDir()
	ca := filepath.Join(dir, "nomad-ca.pem")
	must.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: nomad.Certificate().Raw}), 0o600))
	cert, key := clientCert(t, dir)

	code, _, errOut := run("status", "-address", nomad.URL, "-scheduler", "")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "certificate")
	code, _, errOut = run("status", "-address", nomad.URL, "-ca-cert", ca, "-scheduler", "")
	must.EqOp(t, 1, code, must.Sprint("Nomad asks for a client certificate"))
	code, _, errOut = run("status", "-address", nomad.URL, "-ca-cert", ca, "-client-cert", cert, "-client-key", key, "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	code, _, errOut = run("status", "-address", nomad.URL, "-tls-skip-verify", "-client-cert", cert, "-client-key", key, "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))

	t.Setenv("NOMAD_ADDR", nomad.URL)
	t.Setenv("NOMAD_CACERT", ca)
	t.Setenv("NOMAD_CLIENT_CERT", cert)
	t.Setenv("NOMAD_CLIENT_KEY", key)
	code, _, errOut = run("status", "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	// the scheduler found through Nomad's service catalogue, over mTLS
	code, out, errOut := run("job", "status", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "group g: pinned")
}

// clientCert writes a self-signed client certificate and its key.
func clientCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gpushare-cli"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	must.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(k)
	must.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cli.pem"), filepath.Join(dir, "cli-key.pem")
	must.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return certFile, keyFile
}
