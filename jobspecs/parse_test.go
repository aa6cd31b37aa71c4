package jobspecs

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// nomadBinary is the nomad binary the tests parse with: $GPUSHARE_NOMAD,
// the repository's bin/nomad (make nomad), or nomad on PATH. Without one
// the test is skipped: gpushare links no jobspec parser.
func nomadBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUSHARE_NOMAD"); p != "" {
		return p
	}
	if dir, err := os.Getwd(); err == nil {
		for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p := filepath.Join(dir, "bin", "nomad"); exec.Command(p, "version").Run() == nil {
					return p
				}
				break
			}
		}
	}
	if p, err := exec.LookPath("nomad"); err == nil {
		return p
	}
	t.Skip("no nomad binary to parse jobspecs with: set GPUSHARE_NOMAD, run make nomad, or put nomad on PATH")
	return ""
}

// testParse parses with the nomad binary only.
func testParse(t *testing.T, filename string, src []byte, vars []string) (*api.Job, error) {
	t.Helper()
	return Parser{Binary: nomadBinary(t)}.Parse(filename, src, vars)
}

const withVar = `
variable "shares" {
  type = number
}
job "v" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = var.shares }
      }
    }
  }
}
`

func TestParseWithBinaryTakesVariables(t *testing.T) {
	job, err := testParse(t, "v.nomad.hcl", []byte(withVar), []string{"shares=25"})
	must.NoError(t, err)
	must.EqOp(t, "v", *job.ID)
	must.EqOp(t, uint64(25), *job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count)

	_, err = testParse(t, "v.nomad.hcl", []byte(withVar), []string{"shares=25", "nope=1"})
	must.ErrorContains(t, err, `v.nomad.hcl: Undefined -var variable; A "nope" variable`)
	_, err = testParse(t, "v.nomad.hcl", []byte(withVar), []string{"shares"})
	must.ErrorContains(t, err, `-var "shares": want name=value`)
}

// A file on disk is parsed in place: file() reads beside it as `nomad job
// run` would, and errors name the path given.
func TestParseWithBinaryReadsTheFileInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.nomad.hcl")
	src := []byte("job \"f\" {\n  group \"g\" {\n    count = \n  }\n}\n")
	must.NoError(t, os.WriteFile(path, src, 0o644))
	_, err := testParse(t, path, src, nil)
	must.ErrorContains(t, err, path+":3,")
	must.EqOp(t, 1, strings.Count(err.Error(), "f.nomad.hcl"))
}

// fakeAgent answers /v1/jobs/parse with status and body, recording the
// request.
func fakeAgent(t *testing.T, status int, body string, got *api.JobsParseRequest) *api.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		must.EqOp(t, "/v1/jobs/parse", r.URL.Path)
		b, _ := io.ReadAll(r.Body)
		must.NoError(t, json.Unmarshal(b, got))
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	must.NoError(t, err)
	return c
}

func TestParseAsksTheAgentFirst(t *testing.T) {
	var req api.JobsParseRequest
	c := fakeAgent(t, 200, `{"ID":"from-agent","Name":"from-agent"}`, &req)
	job, err := Parser{Nomad: c, Binary: "/nonexistent/nomad"}.Parse("v.nomad.hcl", []byte(withVar), []string{"shares=25", `note=a "${b}"`, `ids=["x"]`})
	must.NoError(t, err)
	must.EqOp(t, "from-agent", *job.ID)
	must.EqOp(t, withVar, req.JobHCL)
	must.False(t, req.Canonicalize)
	must.EqOp(t, "shares = \"25\"\nnote = \"a \\\"$${b}\\\"\"\nids = [\"x\"]\n", req.Variables)
}

// The agent's parse error is the jobspec's: it is reported with the
// file's name, and the binary is not tried.
func TestParseReportsTheAgentsParseError(t *testing.T) {
	var req api.JobsParseRequest
	c := fakeAgent(t, 400, "Failed to parse job: input.hcl:3,10-4,1: Invalid expression; Expected the start of an expression", &req)
	_, err := Parser{Nomad: c, Binary: "/nonexistent/nomad"}.Parse("broken.nomad.hcl", []byte("x"), nil)
	must.EqError(t, err, "broken.nomad.hcl:3,10-4,1: Invalid expression; Expected the start of an expression")
}

// An agent that refuses the request (no token) or does not answer is
// skipped for the binary; with neither, the error says what is needed.
func TestParseFallsBackToTheBinary(t *testing.T) {
	var req api.JobsParseRequest
	c := fakeAgent(t, 403, "Permission denied", &req)
	job, err := Parser{Nomad: c, Binary: nomadBinary(t)}.Parse("v.nomad.hcl", []byte(withVar), []string{"shares=50"})
	must.NoError(t, err)
	must.EqOp(t, uint64(50), *job.TaskGroups[0].Tasks[0].Resources.Devices[0].Count)

	t.Setenv("PATH", t.TempDir())
	_, err = Parser{Nomad: c}.Parse("v.nomad.hcl", []byte(withVar), nil)
	must.True(t, errors.Is(err, ErrNoParser), must.Sprint(err))
	must.ErrorContains(t, err, "v.nomad.hcl: no Nomad to parse the jobspec with: set NOMAD_ADDR")
	must.ErrorContains(t, err, "403")
}

// The agent reads no files; when it fails on one and the binary is there,
// the binary parses the jobspec as `nomad job run` would.
func TestParseReadsFilesWithTheBinary(t *testing.T) {
	script := filepath.Join(t.TempDir(), "run.sh")
	must.NoError(t, os.WriteFile(script, []byte("echo hi\n"), 0o644))
	src := []byte(`job "f" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", file("` + script + `")]
      }
    }
  }
}
`)
	var req api.JobsParseRequest
	c := fakeAgent(t, 400, `Failed to parse job: input.hcl:7,28-32: Error in function call; Call to function "file" failed: filesystem function disabled.`, &req)
	job, err := Parser{Nomad: c, Binary: nomadBinary(t)}.Parse("f.nomad.hcl", src, nil)
	must.NoError(t, err)
	must.Eq(t, any([]any{"-c", "echo hi\n"}), job.TaskGroups[0].Tasks[0].Config["args"])
}
