package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The cluster speaks TLS on HTTP and RPC (certificates made at test time,
// client certificates required on HTTPS). A scheduler configured with the
// https address, the CA and a client certificate pins a gated job, which
// runs.
func TestSchedulerOverTLS(t *testing.T) {
	files, err := devcluster.GenerateTLS(t.TempDir())
	must.NoError(t, err)
	e := newEnvWith(t, devcluster.Options{TLS: files})
	must.True(t, strings.HasPrefix(e.c.Address(), "https://"))

	// without a client certificate the agents refuse the API
	noCert, err := api.NewClient(&api.Config{Address: e.c.Address(), TLSConfig: &api.TLSConfig{CACert: files.CAFile}})
	must.NoError(t, err)
	_, _, err = noCert.Jobs().List(nil)
	must.ErrorContains(t, err, "certificate")
	t.Logf("without a client certificate: %v", err)

	e.nomadHCL = fmt.Sprintf("  ca_cert = %q\n  client_cert = %q\n  client_key = %q\n", files.CAFile, files.ClientCert, files.ClientKey)
	e.startScheduler("s1", "")
	e.register("tls-half", map[string]any{"shares": 50})
	a := e.running("tls-half", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	job, _, err := e.nomad.Jobs().Info("tls-half", nil)
	must.NoError(t, err)
	_, ok := pin.ParseRecord(job, "g")
	must.True(t, ok, must.Sprint("the job carries no placement record"))
}
