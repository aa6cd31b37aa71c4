package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/gpushare/scheduler/sim/gavel"
	"github.com/shoenig/test/must"
)

func TestSimUsageAndFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no trace set", []string{"sim"}, 1, "openb"},
		{"unknown trace set", []string{"sim", "philly"}, 1, "gavel"},
		{"bad seeds", []string{"sim", "openb", "-seeds", "x"}, 1, "seed"},
		{"bad format", []string{"sim", "gavel", "-format", "pdf"}, 1, "svg or png"},
		{"bad cluster", []string{"sim", "gavel", "-cluster", "tpu"}, 1, "unknown cluster"},
		{"bad slowdown", []string{"sim", "gavel", "-max-slowdown", "1.5"}, 1, "max-slowdown"},
		{"bad stretch", []string{"sim", "gavel", "-max-stretch", "-0.5"}, 1, "-max-stretch -0.5: want a share"},
		{"unknown policy", []string{"sim", "gavel", "-traces", "795a4c", "-policies", "magic", "-quiet"}, 1, "unknown gavel policy"},
		{"bad elastic share", []string{"sim", "gavel", "-elastic-share", "1.5"}, 1, "-elastic-share"},
		{"bad elastic max", []string{"sim", "gavel", "-elastic-share", "0.5", "-elastic-max", "1"}, 1, "-elastic-max"},
		{"bad elastic seeds", []string{"sim", "gavel", "-elastic-share", "0.5", "-elastic-seeds", "x"}, 1, "-elastic-seeds"},
		{"bad timeslice max", []string{"sim", "gavel", "-timeslice", "-timeslice-max-per-gpu", "1"}, 1, "-timeslice-max-per-gpu"},
		{"bad timeslice switch", []string{"sim", "gavel", "-timeslice", "-timeslice-switch-cost", "3s"}, 1, "-timeslice-switch-cost"},
		{"bad timeslice quantum", []string{"sim", "gavel", "-timeslice", "-timeslice-quantum", "1ms"}, 1, "-timeslice-quantum"},
		{"timeslice without exclusive", []string{"sim", "gavel", "-timeslice", "-traces", "925e2b", "-policies", "packing", "-quiet"}, 1, "run the policy exclusive"},
		{"unknown trace", []string{"sim", "openb", "-traces", "nope", "-seeds", "42", "-quiet"}, 1, "nope"},
		{"unknown GPU type", []string{"sim", "gavel", "-gpu", "a100", "-traces", "925e2b", "-quiet"}, 1, `GPU type "a100": no measured throughputs (known: k80, p100, v100)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := run(c.args...)
			must.EqOp(t, c.code, code, must.Sprint(errOut))
			must.StrContains(t, errOut, c.msg)
		})
	}
}

func TestParseSeeds(t *testing.T) {
	s, err := parseSeeds("42-44,50")
	must.NoError(t, err)
	must.Eq(t, []int64{42, 43, 44, 50}, s)
	_, err = parseSeeds("44-42")
	must.Error(t, err)
}

func TestSimGavelJSONAndOut(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run("sim", "gavel", "-traces", "925e2b", "-cluster", "pcie:2", "-json", "-out", dir)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		Metrics []map[string]any
		Goals   []map[string]any
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.SliceLen(t, len(gavel.Policies), j.Metrics) // one per policy
	for _, m := range j.Metrics {
		must.MapContainsKeys(t, m, []string{"avg_jct_h", "p99_jct_h", "avg_queueing_h", "makespan_h", "avg_gpu_util"})
	}
	must.SliceLen(t, 1, j.Goals) // one trace on one cluster
	must.MapContainsKeys(t, j.Goals[0], []string{"gpushare_avg_jct_h", "runner_up", "lowest_avg_jct", "p99_no_worse_than_exclusive"})
	must.StrContains(t, errOut, fmt.Sprintf("gavel %d/%d", len(gavel.Policies), len(gavel.Policies)))
	for _, f := range []string{"gavel.md", "gavel_metrics.csv", "gavel_goals.csv", "gavel_avg_jct_pcie-2.svg", "gavel_jct_cdf_925e2b_pcie-2.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		must.NoError(t, err)
	}
	// without -elastic-share nothing elastic is run or written
	must.StrNotContains(t, out, `"elastic`)
	_, err := os.Stat(filepath.Join(dir, "gavel_elastic.csv"))
	must.True(t, os.IsNotExist(err))
}

// TestSimGavelElastic: -elastic-share runs gpushare again once per seed,
// beside the run without, and reports grows and shrinks.
// -gpu runs the clusters at another GPU type's measured throughputs: the
// JSON names it, the jobs run at its speed (a K80 is slower), and the page
// says the model was fitted on V100 pairs only.
func TestSimGavelOnAnotherGPUType(t *testing.T) {
	avg := map[string]float64{}
	for _, gpu := range []string{"v100", "k80"} {
		dir := t.TempDir()
		code, out, errOut := run("sim", "gavel", "-gpu", gpu, "-traces", "925e2b", "-cluster", "pcie:2", "-policies", "exclusive,gpushare", "-json", "-quiet", "-out", dir)
		must.EqOp(t, 0, code, must.Sprint(errOut))
		var j struct {
			GPU     string
			Metrics []struct {
				Policy string  `json:"policy"`
				AvgJCT float64 `json:"avg_jct_h"`
			}
		}
		must.NoError(t, json.Unmarshal([]byte(out), &j))
		must.EqOp(t, gpu, j.GPU)
		avg[gpu] = j.Metrics[0].AvgJCT
		md, err := os.ReadFile(filepath.Join(dir, "gavel.md"))
		must.NoError(t, err)
		if gpu == "k80" {
			must.StrContains(t, string(md), "Measured K80 throughputs alone and co-located (Gavel, OSDI'20); gpushare's interference model fitted on V100 pairs only, never on K80's.")
		} else {
			must.StrContains(t, string(md), "Measured V100 throughputs alone and co-located (Gavel, OSDI'20). Policies:")
		}
	}
	must.Greater(t, avg["v100"], avg["k80"], must.Sprint("exclusive's average JCT: K80s are slower"))
}

func TestSimGavelElastic(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run("sim", "gavel", "-traces", "925e2b", "-cluster", "pcie:2", "-policies", "exclusive,gpushare",
		"-elastic-share", "1", "-elastic-seeds", "1-2", "-json", "-out", dir)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		Metrics []map[string]any
		Elastic []struct {
			Elastic gavel.Elastic
			Metrics []gavel.Metrics
		}
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.SliceLen(t, 2, j.Metrics)
	must.SliceLen(t, 2, j.Elastic)
	for i, e := range j.Elastic {
		must.Eq(t, uint64(i+1), e.Elastic.Seed)
		must.SliceLen(t, 1, e.Metrics) // gpushare only
		must.EqOp(t, "gpushare", e.Metrics[0].Policy)
		must.Positive(t, e.Metrics[0].Grows)
	}
	must.StrContains(t, errOut, "[elastic, seed 2]")
	md, err := os.ReadFile(filepath.Join(dir, "gavel.md"))
	must.NoError(t, err)
	must.StrContains(t, string(md), "## Elastic groups")
	_, err = os.Stat(filepath.Join(dir, "gavel_elastic.csv"))
	must.NoError(t, err)
}

// TestSimGavelTimeslice: -timeslice runs exclusive again with
// time-slicing, reported beside its queueing.
func TestSimGavelTimeslice(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run("sim", "gavel", "-traces", "925e2b", "-cluster", "pcie:1", "-policies", "exclusive,packing",
		"-timeslice", "-timeslice-greedy", "-json", "-out", dir)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		Metrics    []gavel.Metrics
		Timesliced []gavel.Metrics
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.SliceLen(t, 2, j.Metrics)
	must.SliceLen(t, 1, j.Timesliced) // exclusive only
	must.EqOp(t, "exclusive", j.Timesliced[0].Policy)
	must.EqOp(t, j.Metrics[0].Jobs, j.Timesliced[0].Jobs)
	must.StrContains(t, errOut, "[time-sliced]")
	md, err := os.ReadFile(filepath.Join(dir, "gavel.md"))
	must.NoError(t, err)
	must.StrContains(t, string(md), "## Time-slicing")
	must.StrContains(t, string(md), "greedy: a job is time-sliced even while")
	_, err = os.Stat(filepath.Join(dir, "gavel_timeslice.csv"))
	must.NoError(t, err)
}

func TestSimOpenbJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the openb default trace")
	}
	code, out, errOut := run("sim", "openb", "-traces", "default", "-policies", "best-fit,gpushare", "-seeds", "42", "-json")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		Summaries []struct {
			Policy   string  `json:"policy"`
			Alloc100 float64 `json:"alloc_ratio_100"`
			Alloc130 float64 `json:"alloc_ratio_130"`
		} `json:"summaries"`
		Validation []struct {
			Demand int  `json:"arrived_demand"`
			OK     bool `json:"ok"`
		} `json:"validation"`
		// fgd did not run: its numbers are null, not an encoding error
		VsFGD []struct {
			Gpushare float64  `json:"gpushare"`
			FGDOurs  *float64 `json:"fgd_ours"`
		} `json:"gpushare_vs_fgd"`
		Limits []struct {
			Demand   int      `json:"arrived_demand"`
			Offline  float64  `json:"offline"`
			Bound    float64  `json:"bound"`
			GapShare *float64 `json:"gap_share"`
		} `json:"limits"`
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.SliceLen(t, 2, j.Summaries)
	must.Between(t, 80, j.Summaries[0].Alloc130, 100)
	must.SliceLen(t, 2, j.Validation) // best-fit at 100% and 130%
	must.SliceLen(t, 1, j.VsFGD)
	must.Nil(t, j.VsFGD[0].FGDOurs)
	must.Between(t, 80, j.VsFGD[0].Gpushare, 100)
	// -limits is on by default: the offline packer and the bound at 100%
	// and 130%; without fgd there is no gap share.
	must.SliceLen(t, 2, j.Limits)
	must.EqOp(t, 130, j.Limits[1].Demand)
	must.Between(t, 80, j.Limits[1].Offline, j.Limits[1].Bound)
	must.Nil(t, j.Limits[1].GapShare)
}

// -robustness-seed draws -robustness's model noise and run-time errors:
// those two conditions run with it and say so by name, the others are as
// they were (a seed changes nothing they perturb).
func TestSimGavelRobustnessSeed(t *testing.T) {
	code, out, errOut := run("sim", "gavel", "-traces", "925e2b", "-cluster", "pcie:2", "-policies", "exclusive,sjf-bsbf,gpushare",
		"-robustness", "-robustness-seed", "2", "-json", "-quiet")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		Conditions []struct {
			Condition gavel.Robustness `json:"condition"`
		}
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.SliceLen(t, len(gavel.StandardConditions), j.Conditions)
	for i, c := range j.Conditions {
		want := gavel.StandardConditions[i]
		if want.Noise > 0 || want.RuntimeSigma > 0 {
			want.Seed, want.Name = 2, want.Name+", seed 2"
		}
		must.Eq(t, want, c.Condition)
	}
	must.Eq(t, gavel.StandardConditions, gavel.StandardConditionsSeeded(1), must.Sprint("seed 1 is the standard conditions, names unchanged"))
}
