package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// What a pipeline sees: the exit codes of `nomad job run` for a gated and an
// ungated spec, and of the ways README recommends for CI.
func TestPipelineExitCodes(t *testing.T) {
	e := newEnv(t)
	s := e.startScheduler("s", "")
	e.eventually(30*time.Second, "the scheduler to lead", s.leader)
	src, err := os.ReadFile(filepath.Join("testdata", "shares.nomad.hcl"))
	must.NoError(t, err)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name+".nomad.hcl")
		must.NoError(t, os.WriteFile(p, []byte(strings.Replace(text, `job "shares"`, `job "`+name+`"`, 1)), 0o644))
		return p
	}
	gate := "    constraint {\n      attribute = \"${meta.gpushare_gate}\"\n      value     = \"pending\"\n    }\n"
	must.StrContains(t, string(src), gate)
	gated := string(src)
	ungated := strings.Replace(string(src), gate, "", 1)
	run := func(bin string, args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.c.Address(), "GPUSHARE_ADDR="+s.http)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		must.NoError(t, err)
		return 0, string(out)
	}
	codes := map[string]int{}
	for _, c := range []struct {
		name, spec string
		bin        string
		args       []string
	}{
		{"nomad-gated", gated, nomadBin, []string{"job", "run", "-var", "shares=25"}},
		{"nomad-gated-detach", gated, nomadBin, []string{"job", "run", "-detach", "-var", "shares=25"}},
		{"nomad-ungated", ungated, nomadBin, []string{"job", "run", "-var", "shares=25"}},
		{"gpushare-run", ungated, cliBin, []string{"job", "run", "-var", "shares=25"}},
	} {
		code, out := run(c.bin, append(c.args, write(c.name, c.spec))...)
		t.Logf("%s: exit %d\n%s", c.name, code, out)
		codes[c.name] = code
		if c.name == "nomad-gated" {
			// it stops at the gated version's failed placement (2), or
			// follows the deployment the pin cancels (1): all is well either way
			must.True(t, code == 1 || code == 2, must.Sprint(out))
			must.True(t, strings.Contains(out, "failed to place") || strings.Contains(out, "Cancelled due to newer version"), must.Sprint(out))
		}
	}
	must.EqOp(t, 0, codes["nomad-gated-detach"])
	must.EqOp(t, 0, codes["gpushare-run"])
	// all is well: every job runs, on one GPU
	for name := range codes {
		a := e.running(name, 1, 60*time.Second)[0]
		must.SliceLen(t, 1, gpus(a), must.Sprint(name))
	}
	// and `gpushare job status` exits 0 once a job runs
	code, out := run(cliBin, "job", "status", "nomad-gated-detach")
	must.EqOp(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "group g: pinned")
}
