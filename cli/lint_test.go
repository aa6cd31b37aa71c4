package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// `gpushare job lint` of 900 shares — 9 whole GPUs in one allocation,
// whose GPUs are all on one node — is an error against a scheduler whose
// largest node has 8 GPUs (named), and a warning without one; 950 shares
// (not whole GPUs) is an error either way.
func TestJobLintRequestLargerThanAnyNode(t *testing.T) {
	useNomadBinary(t)
	sched := serveJSON(t, map[string]any{
		"/v1/profiles": `[]`,
		"/v1/gpus": `{"nodes":[{"id":"1111aaaa-2222","name":"dgx","gpus":[{"index":0},{"index":1},{"index":2},{"index":3},{"index":4},{"index":5},{"index":6},{"index":7}]},
			{"id":"3333bbbb-4444","gpus":[{"index":0},{"index":1}]}]}`,
	})
	dir := t.TempDir()
	file := func(count string) string {
		f := filepath.Join(dir, count+".nomad.hcl")
		must.NoError(t, os.WriteFile(f, []byte(`job "j" {
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = `+count+` }
      }
    }
  }
}
`), 0o644))
		return f
	}
	code, out, _ := run("job", "lint", "-scheduler", sched, file("900"))
	must.EqOp(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "error: group g: count = 900 shares is 9 whole GPUs in one allocation")
	must.StrContains(t, out, "the cluster's largest node, dgx, has 8, so it can never be placed")
	must.StrNotContains(t, out, ": ok")

	code, out, _ = run("job", "lint", "-scheduler", sched, file("800"))
	must.EqOp(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, ": ok")

	code, out, _ = run("job", "lint", "-scheduler", "", file("900"))
	must.EqOp(t, 0, code, must.Sprint(out))
	must.StrContains(t, out, "warning: group g: count = 900 shares is 9 whole GPUs")
	must.StrContains(t, out, "pass -scheduler")

	code, out, _ = run("job", "lint", "-scheduler", "", file("950"))
	must.EqOp(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "not whole GPUs")
}

// A device name whose GPU model no node of the cluster has can never be
// placed: against a scheduler's map, lint says so on the device's line,
// with the model the cluster has nearest it.
func TestJobLintMisspeltModel(t *testing.T) {
	useNomadBinary(t)
	sched := serveJSON(t, map[string]any{
		"/v1/profiles": `[]`,
		"/v1/gpus": `{"nodes":[{"id":"1111aaaa-2222","name":"dgx","model":"NVIDIA H100 80GB HBM3","gpus":[{"index":0}]},
			{"id":"3333bbbb-4444","name":"t4","model":"Tesla T4","gpus":[{"index":0}]}]}`,
	})
	dir := t.TempDir()
	file := func(model string) string {
		f := filepath.Join(dir, "m.nomad.hcl")
		must.NoError(t, os.WriteFile(f, []byte(`job "j" {
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare/`+model+`" { count = 25 }
      }
    }
  }
}
`), 0o644))
		return f
	}
	f := file("NVIDIA H100 80GB HMB3")
	code, out, _ := run("job", "lint", "-scheduler", sched, f)
	must.EqOp(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, f+`:11: error: group g: device "nvidia/gpushare/NVIDIA H100 80GB HMB3" asks for GPUs of model "NVIDIA H100 80GB HMB3", and no node of the cluster has them, so it can never be placed; did you mean "nvidia/gpushare/NVIDIA H100 80GB HBM3"?`)
	code, out, _ = run("job", "lint", "-scheduler", sched, file("A100"))
	must.EqOp(t, 1, code, must.Sprint(out))
	must.StrContains(t, out, "the cluster has NVIDIA H100 80GB HBM3, Tesla T4")
	code, out, _ = run("job", "lint", "-scheduler", sched, file("Tesla T4"))
	must.EqOp(t, 0, code, must.Sprint(out))
	code, out, _ = run("job", "lint", "-scheduler", "", file("A100")) // no map: not checked
	must.EqOp(t, 0, code, must.Sprint(out))
}
