package jobspecs

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

const timesliced = `job "ts" {
  meta = {
    "gpushare.timeslice" = "true"
  }
  group "whole" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 100 }
      }
    }
  }
  group "typo" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.timeslice" = "yes"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 30 }
      }
    }
  }
  group "fine" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 30 }
      }
    }
  }
  group "off" {
    constraint {
      attribute = "${meta.gpushare_gate}"
      value     = "pending"
    }
    meta = {
      "gpushare.timeslice" = "false"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources {
        device "nvidia/gpushare" { count = 200 }
      }
    }
  }
}
`

// gpushare.timeslice is "true" or "false" (anything else an error naming
// its line, once); a time-sliced group of a whole GPU or more per
// allocation is warned of (nothing to share); a time-sliced fraction, or
// whole GPUs not time-sliced, are fine.
func TestLintKnowsTimeslice(t *testing.T) {
	job, err := testParse(t, "ts.nomad.hcl", []byte(timesliced), nil)
	must.NoError(t, err)
	findings := Lint(job, 100)
	Locate(findings, IndexLines("ts.nomad.hcl", []byte(timesliced)))
	byGroup := map[string][]Finding{}
	for _, f := range findings {
		byGroup[f.Group] = append(byGroup[f.Group], f)
	}
	must.SliceLen(t, 1, byGroup["typo"])
	typo := byGroup["typo"][0]
	must.Eq(t, Error, typo.Severity)
	must.EqOp(t, 24, typo.Line) // the group's own key
	must.StrContains(t, typo.String(), `gpushare.timeslice = "yes": want "true"`)

	must.SliceLen(t, 1, byGroup["whole"])
	whole := byGroup["whole"][0]
	must.Eq(t, Warning, whole.Severity)
	must.EqOp(t, 3, whole.Line) // the job's key, which the group inherits
	must.StrContains(t, whole.Message, "nothing to share")
	must.SliceEmpty(t, byGroup["fine"])
	must.SliceEmpty(t, byGroup["off"])
	must.SliceContains(t, KnownMeta(), pin.MetaTimeslice)

	// with 200 shares per GPU, 100 shares is half a GPU's memory
	for _, f := range Lint(job, 200) {
		must.NotEq(t, "whole", f.Group, must.Sprint(f))
	}
}
