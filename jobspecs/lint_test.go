package jobspecs

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func TestExamplesAreClean(t *testing.T) {
	names := ExampleNames()
	must.SliceNotEmpty(t, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			src, err := fs.ReadFile(Examples, name)
			must.NoError(t, err)
			job, err := testParse(t, name, src, nil)
			must.NoError(t, err)
			must.SliceEmpty(t, Lint(job, 100))
		})
	}
}

const bad = `
job "bad" {
  group "split" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "true"
      }
      resources {
        device "nvidia/gpushare" {
          count = 150
        }
      }
    }
  }
  group "gated-no-device" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.class" = "gold"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "true"
      }
    }
  }
}
`

func TestLintFindsProblems(t *testing.T) {
	job, err := testParse(t, "bad.nomad.hcl", []byte(bad), nil)
	must.NoError(t, err)
	findings := Lint(job, 100)
	var all []string
	for _, f := range findings {
		all = append(all, f.String())
	}
	text := strings.Join(all, "\n")
	must.StrContains(t, text, "error: group split: count = 150 shares is more than one GPU (100 shares) but not whole GPUs, so it can never be placed: "+
		"a request of more than shares_per_gpu shares must be a multiple of it (whole GPUs; a fraction is never split across GPUs): ask for 100 or 200")
	must.StrContains(t, text, "error: group split: asks for nvidia/gpushare devices but has no gpushare gate")
	must.StrContains(t, text, "error: group gated-no-device: carries the gpushare gate but asks for no")
	must.True(t, HasErrors(findings))
}

// A gate written the old way still gates (no "has no gpushare gate"), and
// says how to write it today; removing the check fails this.
func TestLintWarnsOfTheLegacyGate(t *testing.T) {
	src := `
job "old" {
  group "g" {
    constraint {
      attribute = "${node.unique.id}"
      value     = "gpushare:pending"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "true"
      }
      resources {
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
}
`
	job, err := testParse(t, "old.nomad.hcl", []byte(src), nil)
	must.NoError(t, err)
	findings := Lint(job, 100)
	must.False(t, HasErrors(findings))
	must.Eq(t, []Finding{{Severity: Warning, Group: "g", Message: LegacyGate}}, findings)
	must.StrContains(t, LegacyGate, "${meta.gpushare_gate}")
}

func TestParseErrorsNameTheLine(t *testing.T) {
	_, err := testParse(t, "broken.nomad.hcl", []byte("job \"x\" {\n  group \"g\" {\n    count = \n  }\n}\n"), nil)
	must.ErrorContains(t, err, "broken.nomad.hcl:")
	must.EqOp(t, 1, strings.Count(err.Error(), "broken.nomad.hcl")) // named once
}

const userPriority = `
job "scavenger" {
  group "opp" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.class" = "opportunistic"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "true"
      }
      env {
        CUDA_MPS_CLIENT_PRIORITY          = "0"
        CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = "80"
      }
      resources {
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
  group "prod" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.class" = "production"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "true"
      }
      env {
        CUDA_MPS_CLIENT_PRIORITY = "0"
      }
      resources {
        device "nvidia/gpushare" {
          count = 25
        }
      }
    }
  }
}
`

// The scheduler writes CUDA_MPS_CLIENT_PRIORITY=1 for opportunistic
// groups unless the task sets it: lint says the user's value wins, and
// that a thread percentage in the env block has no effect.
func TestLintWarnsAboutMPSEnv(t *testing.T) {
	job, err := testParse(t, "p.nomad.hcl", []byte(userPriority), nil)
	must.NoError(t, err)
	findings := Lint(job, 100)
	var all []string
	for _, f := range findings {
		all = append(all, f.String())
	}
	text := strings.Join(all, "\n")
	must.StrContains(t, text, `warning: group opp: task "t" sets CUDA_MPS_CLIENT_PRIORITY=0 for an opportunistic group: the scheduler keeps your value`)
	must.StrContains(t, text, `warning: group opp: task "t" sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=80 in its env block, which has no effect`)
	must.StrNotContains(t, text, "group prod: task") // production: the scheduler writes nothing to disagree with
	must.False(t, HasErrors(findings))
}

// The examples show each driver a GPU task may use; the demo and the e2e
// runs register only those a dev cluster runs anywhere (raw_exec).
func TestExamplesShowEveryDriver(t *testing.T) {
	byDriver := map[string][]string{}
	for _, name := range ExampleNames() {
		drivers, err := ExampleDrivers(name)
		must.NoError(t, err)
		for _, d := range drivers {
			byDriver[d] = append(byDriver[d], name)
		}
	}
	must.Eq(t, []string{"examples/docker-nvidia.nomad.hcl"}, byDriver["docker"])
	must.Eq(t, []string{"examples/exec-batch.nomad.hcl"}, byDriver["exec"])
	must.SliceLen(t, 4, byDriver["raw_exec"])
	must.Eq(t, byDriver["raw_exec"], DemoExampleNames())
}

// A gated parameterized job is pinned to a pool (not an error since
// children are placed inside it), with a warning to dispatch once it is.
func TestLintWarnsOfAGatedParameterizedJob(t *testing.T) {
	job := &api.Job{ID: ptrOf("infer"), Type: ptrOf("batch"), ParameterizedJob: &api.ParameterizedJobConfig{},
		TaskGroups: []*api.TaskGroup{{Name: ptrOf("g"), Constraints: []*api.Constraint{pin.Gate()},
			Tasks: []*api.Task{{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpushare", Count: ptrOf(uint64(25))}}}}}}}}
	fs := Lint(job, 100)
	must.False(t, HasErrors(fs), must.Sprint(fs))
	must.StrContains(t, fmt.Sprint(fs), "pool of GPUs")
	job.ParameterizedJob = nil
	must.StrNotContains(t, fmt.Sprint(Lint(job, 100)), "pool of GPUs")
}

func ptrOf[T any](v T) *T { return &v }
