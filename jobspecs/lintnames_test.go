package jobspecs

import (
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

const misspelt = `job "typos" {
  meta = {
    "gpushare.clas" = "production"
  }
  group "g" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.max_slowdwn" = "0.2"
      "gpushare.frobnicate"  = "1"
      "owner"                = "ml"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushar/H100" { count = 25 }
      }
    }
  }
  group "typeonly" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "gpushare" { count = 25 }
        device "nvidia/gpu" { count = 1 }
      }
    }
  }
  group "ungated" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 0 }
      }
    }
  }
}
`

// Lint refuses what the scheduler would silently ignore — a gpushare.*
// meta key it does not read, a device name that is not gpushare's — with
// the name the user most likely meant; it refuses a group with no gate;
// and every finding names the line it is about.
func TestLintMisspeltNamesAndLines(t *testing.T) {
	job, err := testParse(t, "typos.nomad.hcl", []byte(misspelt), nil)
	must.NoError(t, err)
	findings := Lint(job, 100)
	Locate(findings, IndexLines("typos.nomad.hcl", []byte(misspelt)))
	var lines []string
	for _, f := range findings {
		lines = append(lines, f.In("typos.nomad.hcl"))
	}
	text := strings.Join(lines, "\n")
	for _, want := range []string{
		`typos.nomad.hcl:3: error: job: unknown meta key "gpushare.clas": gpushare ignores it; did you mean "gpushare.class"?`,
		`typos.nomad.hcl:11: error: group g: unknown meta key "gpushare.max_slowdwn": gpushare ignores it; did you mean "gpushare.max_slowdown"?`,
		`typos.nomad.hcl:12: error: group g: unknown meta key "gpushare.frobnicate": gpushare ignores it; it reads gpushare.class, gpushare.elastic,`,
		`typos.nomad.hcl:19: error: group g: device "nvidia/gpushar/H100" is no gpushare device, so gpushare does not place the group; did you mean "nvidia/gpushare/H100"?`,
		`typos.nomad.hcl:28: error: group typeonly: device "gpushare" is no gpushare device, so gpushare does not place the group; did you mean "nvidia/gpushare"?`,
		`typos.nomad.hcl:33: error: group ungated: asks for nvidia/gpushare devices but has no gpushare gate`,
		`typos.nomad.hcl:38: error: group ungated: device count is 0`,
	} {
		must.StrContains(t, text, want)
	}
	must.StrNotContains(t, text, `"owner"`)
	must.StrNotContains(t, text, `"nvidia/gpu"`) // the official plugin's device is no typo of ours
	must.True(t, HasErrors(findings))
}

// The known keys are the scheduler's own: pin's meta constants and the
// elastic opt-in (cli's tests check it against service.MetaElastic).
func TestKnownMetaAreTheSchedulers(t *testing.T) {
	for _, k := range []string{pin.MetaVC, pin.MetaClass, pin.MetaProfile, pin.MetaSMUtil, pin.MetaMemBW, pin.MetaMaxSlowdown,
		pin.MetaExpected, pin.MetaReplicas, pin.MetaTimeslice, pin.MetaPlacement, pin.MetaSignature, "gpushare.elastic"} {
		must.SliceContains(t, KnownMeta(), k)
		must.SliceEmpty(t, lintMeta(map[string]string{k: "x"}, ""))
	}
}

func TestClosest(t *testing.T) {
	for _, c := range []struct {
		s, want string
		limit   int
	}{
		{"gpushare.Class", "gpushare.class", 0},
		{"gpushare.expected_time", "gpushare.expected_runtime", 0},
		{"gpushare.zzzzzzzz", "", 0},
		{"nvidia/gpushare-mg", "nvidia/gpushare-mig", 2},
		{"nvidia/gpu", "", 2},
	} {
		cands := KnownMeta()
		prefix := "gpushare."
		if strings.HasPrefix(c.s, "nvidia/") {
			cands, prefix = []string{pin.DeviceName, "nvidia/gpushare-mig"}, ""
		}
		must.EqOp(t, c.want, closest(c.s, cands, prefix, c.limit), must.Sprint(c.s))
	}
	must.EqOp(t, 3, distance("kitten", "sitting"))
	must.EqOp(t, 0, distance("", ""))
}

// A source HCL cannot read finds nothing: Nomad's parser says why.
func TestIndexLinesOfBadSource(t *testing.T) {
	l := IndexLines("bad.hcl", []byte("job {"))
	must.EqOp(t, 0, l.Line(Finding{Group: "g"}))
	must.EqOp(t, 0, (*Lines)(nil).Line(Finding{}))
}
