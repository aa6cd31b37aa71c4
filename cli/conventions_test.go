package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/internal/version"
	"github.com/gpushare/gpushare/jobspecs"
	"github.com/gpushare/gpushare/scheduler/service"
	"github.com/shoenig/test/must"
)

// The command line behaves as Nomad's does (hashicorp/cli and Nomad's
// command.Meta): -h, -help and --help print the usage and exit 0; a flag
// that does not parse prints the error and the usage and exits 1, as does
// any other bad usage; a command that does not exist exits 127; -version
// and `version` print the version.
func TestExitCodesFollowNomad(t *testing.T) {
	cleanEnv(t)
	type exitCase struct {
		args     []string
		code     int
		out, err string // in stdout, in stderr
	}
	cases := []exitCase{
		{nil, 127, "", "Commands:"},
		{[]string{"frobnicate"}, 127, "", `unknown command "frobnicate"`},
		{[]string{"-h"}, 0, "", "Commands:"},
		{[]string{"-help"}, 0, "", "Commands:"},
		{[]string{"--help"}, 0, "", "Commands:"},
		{[]string{"help"}, 0, "", "Commands:"},
		{[]string{"version"}, 0, "gpushare v", ""},
		{[]string{"-version"}, 0, "gpushare v", ""},
		{[]string{"--version"}, 0, "gpushare v", ""},
		{[]string{"-v"}, 0, "gpushare v", ""},
		{[]string{"version", "-h"}, 0, "", "Usage: gpushare version"},
		{[]string{"job"}, 1, "", "Usage: gpushare job <subcommand>"},
		{[]string{"job", "-h"}, 0, "", "Usage: gpushare job <subcommand>"},
		{[]string{"job", "frobnicate"}, 1, "", "Usage: gpushare job <subcommand>"},
		{[]string{"fixture"}, 1, "", "Usage: gpushare fixture <subcommand>"},
		{[]string{"fixture", "-h"}, 0, "", "Usage: gpushare fixture <subcommand>"},
		{[]string{"sim"}, 1, "", "gpushare sim"},
		{[]string{"sim", "-help"}, 0, "", "gpushare sim"},
		{[]string{"fixture", "check", "-h"}, 0, "", "Usage: gpushare fixture check FILE..."},
		{[]string{"fixture", "check"}, 1, "", "Usage: gpushare fixture check FILE..."},
		{[]string{"job", "status"}, 1, "", "takes one argument"},
		{[]string{"job", "run"}, 1, "", "takes one argument"},
		{[]string{"job", "lint"}, 1, "", "takes one or more jobspec files"},
		{[]string{"status", "extra"}, 1, "", "takes no arguments"},
		{[]string{"job", "status", "-json", "-t", "{{.ID}}", "train"}, 1, "", "both json and template formatting are not allowed"},
		{[]string{"job", "status", "-t", "{{.ID", "train"}, 1, "", "-t: template"},
		{[]string{"status", "-json", "-t", "x"}, 1, "", "both json and template formatting are not allowed"},
	}
	// every command with flags: -h and -help exit 0, an unknown flag 1
	for _, cmd := range [][]string{{"status"}, {"demo"}, {"scheduler"}, {"limit"}, {"version"},
		{"job", "lint"}, {"job", "run"}, {"job", "status"}, {"fixture", "from-topo"}, {"sim", "openb"}, {"sim", "gavel"}} {
		usage := "Usage: gpushare " + strings.Join(cmd, " ")
		for _, h := range []string{"-h", "-help", "--help"} {
			cases = append(cases, exitCase{append(append([]string{}, cmd...), h), 0, "", usage})
		}
		cases = append(cases, exitCase{append(append([]string{}, cmd...), "-no-such-flag"), 1, "", "flag provided but not defined: -no-such-flag\n" + usage})
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := run(c.args...)
			must.EqOp(t, c.code, code, must.Sprintf("stdout %q\nstderr %q", out, errOut))
			must.StrContains(t, out, c.out)
			must.StrContains(t, errOut, c.err)
		})
	}
}

// The commands that ask Nomad take Nomad's client flags, each over the
// NOMAD_* variable that api.DefaultConfig reads.
func TestNomadFlagsOverTheEnvironment(t *testing.T) {
	cleanEnv(t)
	for _, k := range []string{"NOMAD_REGION", "NOMAD_NAMESPACE", "NOMAD_CACERT", "NOMAD_CAPATH", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_TLS_SERVER_NAME", "NOMAD_SKIP_VERIFY"} {
		t.Setenv(k, "")
	}
	for _, cmd := range [][]string{{"status"}, {"job", "run"}, {"job", "status"}, {"job", "lint"}} {
		code, _, errOut := run(append(cmd, "-h")...)
		must.EqOp(t, 0, code)
		for _, f := range []string{"-address", "-region", "-namespace", "-token", "-ca-cert", "-ca-path", "-client-cert", "-client-key", "-tls-server-name", "-tls-skip-verify"} {
			must.True(t, strings.Contains(errOut, "\n  "+f+" ") || strings.Contains(errOut, "\n  "+f+"\n"), must.Sprintf("gpushare %s has no %s", strings.Join(cmd, " "), f))
		}
	}

	t.Setenv("NOMAD_ADDR", "http://env:4646")
	t.Setenv("NOMAD_REGION", "env-region")
	t.Setenv("NOMAD_NAMESPACE", "env-ns")
	t.Setenv("NOMAD_TOKEN", "env-token")
	t.Setenv("NOMAD_CACERT", "/env/ca.pem")
	t.Setenv("NOMAD_CLIENT_CERT", "/env/cert.pem")
	t.Setenv("NOMAD_CLIENT_KEY", "/env/key.pem")
	t.Setenv("NOMAD_TLS_SERVER_NAME", "env.nomad")
	env := (&nomadFlags{}).config()
	must.EqOp(t, "http://env:4646", env.Address)
	must.EqOp(t, "env-region", env.Region)
	must.EqOp(t, "env-ns", env.Namespace)
	must.EqOp(t, "env-token", env.SecretID)
	must.EqOp(t, "/env/ca.pem", env.TLSConfig.CACert)
	must.EqOp(t, "/env/cert.pem", env.TLSConfig.ClientCert)
	must.EqOp(t, "/env/key.pem", env.TLSConfig.ClientKey)
	must.EqOp(t, "env.nomad", env.TLSConfig.TLSServerName)

	fs := newFlags("x", "x", IO{Out: &strings.Builder{}, Err: &strings.Builder{}})
	nf := addNomadFlags(fs, "")
	must.NoError(t, fs.Parse([]string{"-address", "https://flag:4646", "-region", "r", "-namespace", "ns", "-token", "tok",
		"-ca-cert", "/f/ca.pem", "-client-cert", "/f/cert.pem", "-client-key", "/f/key.pem", "-tls-server-name", "f.nomad", "-tls-skip-verify"}))
	cfg := nf.config()
	must.EqOp(t, "https://flag:4646", cfg.Address)
	must.EqOp(t, "r", cfg.Region)
	must.EqOp(t, "ns", cfg.Namespace)
	must.EqOp(t, "tok", cfg.SecretID)
	must.EqOp(t, "/f/ca.pem", cfg.TLSConfig.CACert)
	must.EqOp(t, "/f/cert.pem", cfg.TLSConfig.ClientCert)
	must.EqOp(t, "/f/key.pem", cfg.TLSConfig.ClientKey)
	must.EqOp(t, "f.nomad", cfg.TLSConfig.TLSServerName)
	must.True(t, cfg.TLSConfig.Insecure)
	must.EqOp(t, "ns", nf.ns())

	// what reaches Nomad: -token over NOMAD_TOKEN, -region
	for _, k := range []string{"NOMAD_ADDR", "NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_TLS_SERVER_NAME"} {
		t.Setenv(k, "")
	}
	var token, region string
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, region = r.Header.Get("X-Nomad-Token"), r.URL.Query().Get("region")
		_, _ = w.Write([]byte(`[]`))
	}))
	defer nomad.Close()
	code, _, errOut := run("status", "-address", nomad.URL, "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "env-token", token)
	must.EqOp(t, "env-region", region)
	code, _, errOut = run("status", "-address", nomad.URL, "-token", "flag-token", "-region", "flag-region", "-scheduler", "")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "flag-token", token)
	must.EqOp(t, "flag-region", region)
}

// `gpushare job status` asks about the job in NOMAD_NAMESPACE, as
// `gpushare job run` registers it there; -namespace wins.
func TestJobStatusHonoursNomadNamespace(t *testing.T) {
	cleanEnv(t)
	var asked string
	sched := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs/train" {
			http.NotFound(w, r)
			return
		}
		asked = r.URL.Query().Get("namespace")
		_, _ = w.Write([]byte(`{"namespace":"` + asked + `","id":"train","groups":[{"name":"g","state":"running"}]}`))
	}))
	defer sched.Close()
	t.Setenv("NOMAD_NAMESPACE", "team-b")
	code, out, errOut := run("job", "status", "-scheduler", sched.URL, "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "team-b", asked)
	must.StrContains(t, out, "job train (namespace team-b)")
	code, _, errOut = run("job", "status", "-scheduler", sched.URL, "-namespace", "team-c", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "team-c", asked)
	t.Setenv("NOMAD_NAMESPACE", "")
	code, _, _ = run("job", "status", "-scheduler", sched.URL, "train")
	must.EqOp(t, 0, code)
	must.EqOp(t, "default", asked)
}

// `gpushare job status` says what happened: a job the scheduler does not
// know, a token it refuses, a token Nomad refuses when asked for the
// scheduler's service — not that the scheduler did not answer.
func TestJobStatusSaysWhatWentWrong(t *testing.T) {
	cleanEnv(t)
	sched := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("X-Nomad-Token") == "bad":
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"error":"permission denied: the token may not read-job in namespace default"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no job nope in namespace default (use ?namespace=)"}`))
		}
	}))
	defer sched.Close()

	code, _, errOut := run("job", "status", "-scheduler", sched.URL, "nope")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, `gpushare job status: job "nope" not found in namespace "default"`)
	must.StrContains(t, errOut, "no job nope in namespace default")
	must.StrNotContains(t, errOut, "did not answer")

	code, _, errOut = run("job", "status", "-scheduler", sched.URL, "-token", "bad", "nope")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "refused the token: 403 Forbidden: permission denied: the token may not read-job in namespace default")
	must.StrNotContains(t, errOut, "did not answer")
	must.StrNotContains(t, errOut, "not found")

	// Nomad refuses the token that looks the service up
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	defer nomad.Close()
	code, _, errOut = run("job", "status", "-address", nomad.URL, "-token", "refused", "train")
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, "Nomad refused the token when asked for the service gpushare-scheduler (403 Permission denied)")
	must.StrContains(t, errOut, "set NOMAD_TOKEN (or -token)")
	must.StrNotContains(t, errOut, "no Nomad service gpushare-scheduler found")
}

// -json and -t print the scheduler's status of the job, as Nomad's read
// commands print theirs.
func TestJobStatusJSONAndTemplate(t *testing.T) {
	cleanEnv(t)
	sched := serveJSON(t, map[string]any{"/v1/jobs/train": `{"namespace":"default","id":"train","groups":[{"name":"g","state":"pinned","reason":"r"}]}`})
	code, out, errOut := run("job", "status", "-scheduler", sched, "-json", "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var st service.JobStatus
	must.NoError(t, json.Unmarshal([]byte(out), &st))
	must.EqOp(t, "train", st.ID)
	must.EqOp(t, "pinned", st.Groups[0].State)
	must.StrContains(t, out, "\n    \"") // indented as Nomad's -json
	code, out, errOut = run("job", "status", "-scheduler", sched, "-t", `{{.ID}}:{{range .Groups}} {{.Name}}={{.State}}{{end}}`, "train")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.EqOp(t, "train: g=pinned", out)
}

// lint's -json and -t give each file's findings with their lines, and
// -for-job-run checks a file as `gpushare job run` registers it.
func TestJobLintFormatsAndGate(t *testing.T) {
	useNomadBinary(t)
	file := filepath.Join(t.TempDir(), "j.nomad.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`job "j" {
  group "g" {
    meta = { "gpushare.clas" = "production" }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 25 }
      }
    }
  }
}
`), 0o644))
	code, out, _ := run("job", "lint", "-scheduler", "", file)
	must.EqOp(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, file+`:3: error: group g: unknown meta key "gpushare.clas": gpushare ignores it; did you mean "gpushare.class"?`)
	must.StrContains(t, out, file+":2: error: group g: asks for nvidia/gpushare devices but has no gpushare gate")

	code, out, _ = run("job", "lint", "-scheduler", "", "-json", file)
	must.EqOp(t, 1, code, must.Sprint(out))
	var res []lintResult
	must.NoError(t, json.Unmarshal([]byte(out), &res))
	must.SliceLen(t, 1, res)
	must.False(t, res[0].OK)
	must.SliceLen(t, 2, res[0].Findings)
	must.EqOp(t, 3, res[0].Findings[0].Line)
	must.EqOp(t, "gpushare.clas", res[0].Findings[0].Meta)

	code, out, _ = run("job", "lint", "-scheduler", "", "-t", `{{range .}}{{range .Findings}}{{.Line}} {{.Severity}}{{"\n"}}{{end}}{{end}}`, file)
	must.EqOp(t, 1, code)
	must.EqOp(t, "3 error\n2 error\n", out)

	// job run refuses it for the meta key, on its line, before asking the cluster
	code, _, errOut := run("job", "run", "-scheduler", "", file)
	must.EqOp(t, 1, code)
	must.StrContains(t, errOut, file+`:3: error: group g: unknown meta key "gpushare.clas"`)
	must.StrNotContains(t, errOut, "no gpushare gate") // it adds the gate

	// as job run registers it: the gate added, only the meta key is wrong
	code, out, _ = run("job", "lint", "-scheduler", "", "-for-job-run", file)
	must.EqOp(t, 1, code)
	must.StrContains(t, out, file+": `gpushare job run` adds the gpushare gate to g")
	must.StrNotContains(t, out, "no gpushare gate")
	must.NoError(t, os.WriteFile(file, []byte(strings.Replace(mustRead(t, file), "gpushare.clas", "gpushare.class", 1)), 0o644))
	code, out, _ = run("job", "lint", "-scheduler", "", "-for-job-run", file)
	must.EqOp(t, 0, code, must.Sprint(out))
	code, _, _ = run("job", "lint", "-scheduler", "", file)
	must.EqOp(t, 1, code) // without the gate, for `nomad job run`
}

func mustRead(t *testing.T, file string) string {
	b, err := os.ReadFile(file)
	must.NoError(t, err)
	return string(b)
}

// lint knows the scheduler's elastic opt-in, defined by the service.
func TestLintKnowsTheElasticMeta(t *testing.T) {
	must.SliceContains(t, jobspecs.KnownMeta(), service.MetaElastic)
}

// A stamped build reports the stamp exactly; an unstamped one the
// module's version and the commit, when Go recorded them.
func TestVersionString(t *testing.T) {
	must.EqOp(t, "v1.2.3", versionString("v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}}))
	must.EqOp(t, version.Unstamped, versionString(version.Unstamped, nil))
	must.EqOp(t, "v1.4.0", versionString(version.Unstamped, &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}))
	must.EqOp(t, version.Unstamped+" (revision 0123456789ab, modified)", versionString(version.Unstamped, &debug.BuildInfo{
		Main:     debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}},
	}))
}
