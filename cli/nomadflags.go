package cli

import (
	"crypto/tls"
	"flag"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// nomadFlags are Nomad's client flags, declared as Nomad's CLI declares
// them (command/meta.go, FlagSetClient). The api package reads the NOMAD_*
// environment itself (api.DefaultConfig: NOMAD_ADDR, NOMAD_REGION,
// NOMAD_NAMESPACE, NOMAD_TOKEN, NOMAD_CACERT, NOMAD_CAPATH,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME,
// NOMAD_SKIP_VERIFY); a flag that is given overrides it.
type nomadFlags struct {
	address, region, namespace, token                    string
	caCert, caPath, clientCert, clientKey, tlsServerName string
	skipVerify                                           bool
}

// addNomadFlags declares Nomad's client flags on fs; purpose, when not
// empty, says what the command asks Nomad for (the -address help line).
func addNomadFlags(fs *flag.FlagSet, purpose string) *nomadFlags {
	f := &nomadFlags{}
	addr := "Nomad's HTTP address (default: $NOMAD_ADDR, else http://127.0.0.1:4646)"
	if purpose != "" {
		addr = "Nomad's HTTP address, " + purpose + " (default: $NOMAD_ADDR, else http://127.0.0.1:4646)"
	}
	fs.StringVar(&f.address, "address", "", addr)
	fs.StringVar(&f.region, "region", "", "Nomad region (default: $NOMAD_REGION, else the agent's)")
	fs.StringVar(&f.namespace, "namespace", "", "Nomad namespace (default: $NOMAD_NAMESPACE, else default)")
	fs.StringVar(&f.token, "token", "", "Nomad ACL token (default: $NOMAD_TOKEN); also sent to the scheduler when $"+EnvSchedulerToken+" is unset")
	fs.StringVar(&f.caCert, "ca-cert", "", "PEM CA certificate to verify Nomad's TLS certificate (default: $NOMAD_CACERT)")
	fs.StringVar(&f.caPath, "ca-path", "", "directory of PEM CA certificates (default: $NOMAD_CAPATH)")
	fs.StringVar(&f.clientCert, "client-cert", "", "PEM client certificate for Nomad's mTLS (default: $NOMAD_CLIENT_CERT)")
	fs.StringVar(&f.clientKey, "client-key", "", "PEM key of -client-cert (default: $NOMAD_CLIENT_KEY)")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "server name to verify Nomad's certificate against (default: $NOMAD_TLS_SERVER_NAME)")
	fs.BoolVar(&f.skipVerify, "tls-skip-verify", false, "do not verify Nomad's TLS certificate: insecure (default: $NOMAD_SKIP_VERIFY)")
	return f
}

// config is api.DefaultConfig (the NOMAD_* environment) with the flags
// that were given over it, as Nomad's CLI builds its own (Meta.clientConfig).
func (f *nomadFlags) config() *api.Config {
	cfg := api.DefaultConfig()
	if f == nil {
		return cfg
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Address, f.address)
	set(&cfg.Region, f.region)
	set(&cfg.Namespace, f.namespace)
	set(&cfg.SecretID, f.token)
	set(&cfg.TLSConfig.CACert, f.caCert)
	set(&cfg.TLSConfig.CAPath, f.caPath)
	set(&cfg.TLSConfig.ClientCert, f.clientCert)
	set(&cfg.TLSConfig.ClientKey, f.clientKey)
	set(&cfg.TLSConfig.TLSServerName, f.tlsServerName)
	if f.skipVerify {
		cfg.TLSConfig.Insecure = true
	}
	return cfg
}

// client is a Nomad client with config; timeout, when positive, bounds
// each request (against a hang, not a slow machine).
func (f *nomadFlags) client(timeout time.Duration) (*api.Client, error) {
	cfg := f.config()
	if timeout > 0 && !strings.HasPrefix(cfg.Address, "unix:") {
		// api.NewClient sets up TLS only on a client of its own making:
		// this one gets the same transport and TLS settings
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		t.TLSHandshakeTimeout = 10 * time.Second
		t.ForceAttemptHTTP2 = false
		hc := &http.Client{Transport: t, Timeout: timeout}
		if err := api.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
			return nil, err
		}
		cfg.HttpClient = hc
	}
	return api.NewClient(cfg)
}

// ns is the namespace the commands ask Nomad and the scheduler about:
// -namespace, else $NOMAD_NAMESPACE, else "default".
func (f *nomadFlags) ns() string {
	if ns := f.config().Namespace; ns != "" {
		return ns
	}
	return "default"
}
