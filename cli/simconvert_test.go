package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// Throughputs measured in Gavel's form on a GPU type gpushare does not
// ship (here Gavel's V100 measurements of three job types, named as an
// A100's) become a -data directory the simulator runs at that type.
func TestSimGavelThroughputsMakesADataDirectory(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "scheduler", "sim", "gavel", "testdata", "gavel_throughputs_excerpt.json"))
	must.NoError(t, err)
	in := filepath.Join(t.TempDir(), "a100.json")
	must.NoError(t, os.WriteFile(in, []byte(strings.ReplaceAll(string(b), `"v100`, `"a100`)), 0o644))
	dir := filepath.Join(t.TempDir(), "data")
	code, out, errOut := run("sim", "gavel-throughputs", "-gpu", "a100", "-out", dir, in)
	must.EqOp(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "run: gpushare sim gavel -data "+dir+" -gpu a100")
	for _, f := range []string{"isolated_throughputs_a100.csv", "colocation_pairs_a100.csv", "msr_seed0/925e2b.trace"} {
		must.FileExists(t, filepath.Join(dir, f))
	}
	// a trace of the three types measured
	trace := "A3C\tcmd\t-n\t1\t200000\t0\t1\nResNet-18 (batch size 16)\tcmd\t-n\t1\t50000\t60\t1\nRecommendation (batch size 8192)\tcmd\t-n\t1\t90000\t120\t1\n"
	must.NoError(t, os.WriteFile(filepath.Join(dir, "msr_seed0", "mine.trace"), []byte(trace), 0o644))
	code, out, errOut = run("sim", "gavel", "-data", dir, "-gpu", "a100", "-traces", "mine", "-cluster", "pcie:1",
		"-policies", "exclusive,gpushare", "-json", "-quiet")
	must.EqOp(t, 0, code, must.Sprint(errOut))
	var j struct {
		GPU     string
		Metrics []struct {
			Jobs int `json:"jobs"`
		}
	}
	must.NoError(t, json.Unmarshal([]byte(out), &j))
	must.EqOp(t, "a100", j.GPU)
	must.EqOp(t, 3, j.Metrics[0].Jobs)

	// what it cannot do, it says
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-gpu", "a100", in}, exitUsage, "want -gpu, -out and one file"},
		{[]string{"-gpu", "h100", "-out", dir, in}, 1, `no entry "h100"`},
		{[]string{"-gpu", "a100", "-out", dir, filepath.Join(dir, "missing.json")}, 1, "missing.json"},
	} {
		code, _, errOut := run(append([]string{"sim", "gavel-throughputs"}, tc.args...)...)
		must.EqOp(t, tc.code, code)
		must.StrContains(t, errOut, tc.want)
	}
}
