package gavel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// The conversion remakes the shipped V100 files: converted from an
// excerpt of Gavel's simulation_throughputs.json (six jobs of V100, on one
// server and spread, with their pairs among themselves), its rows are
// byte for byte the rows of data/*_v100.csv about those jobs, in the same
// order; the excerpt's K80 entry is not converted. (On the whole file
// it remakes all six shipped files byte for byte.)
func TestConvertRemakesTheShippedRows(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "gavel_throughputs_excerpt.json"))
	must.NoError(t, err)
	defer f.Close()
	iso, pairs, err := ConvertThroughputs(f, "v100")
	must.NoError(t, err)

	jobs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(string(iso), "\r\n"), "\r\n")[1:] {
		f := strings.Split(line, ",")
		jobs[f[0]+","+f[1]+","+f[2]] = true
	}
	must.MapLen(t, 12, jobs, must.Sprint("six jobs, of v100 and v100_unconsolidated"))
	shipped := func(name string, keep func(f []string) bool) string {
		b, err := os.ReadFile(filepath.Join("data", name))
		must.NoError(t, err)
		lines := strings.SplitAfter(string(b), "\r\n")
		out := lines[0]
		for _, l := range lines[1:] {
			if f := strings.Split(strings.TrimSuffix(l, "\r\n"), ","); len(f) > 2 && keep(f) {
				out += l
			}
		}
		return out
	}
	must.EqOp(t, shipped("isolated_throughputs_v100.csv", func(f []string) bool { return jobs[f[0]+","+f[1]+","+f[2]] }), string(iso))
	want := shipped("colocation_pairs_v100.csv", func(f []string) bool {
		return jobs[f[0]+","+f[1]+","+f[2]] && jobs[f[0]+","+f[3]+","+f[4]]
	})
	must.Greater(t, 10, strings.Count(want, "\r\n"))
	must.EqOp(t, want, string(pairs))

	// and the simulator reads what it writes, as any type of -data: the
	// same measurements named as an A100's
	b, err := os.ReadFile(filepath.Join("testdata", "gavel_throughputs_excerpt.json"))
	must.NoError(t, err)
	iso, pairs, err = ConvertThroughputs(strings.NewReader(strings.ReplaceAll(string(b), `"v100`, `"a100`)), "a100")
	must.NoError(t, err)
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, "isolated_throughputs_a100.csv"), iso, 0o644))
	must.NoError(t, os.WriteFile(filepath.Join(dir, "colocation_pairs_a100.csv"), pairs, 0o644))
	gpus, err := Dir(dir).GPUs()
	must.NoError(t, err)
	must.Eq(t, []string{"a100"}, gpus)
	thr, err := Dir(dir).ThroughputsOf("a100")
	must.NoError(t, err)
	v, err := thr.Isolated("A3C", 1, true)
	must.NoError(t, err)
	must.Positive(t, v)
}

func TestConvertRefusesWhatItCannotRead(t *testing.T) {
	for name, tc := range map[string]struct{ in, gpu, want string }{
		"not JSON":           {"v100: 1", "v100", "want a JSON object"},
		"no such type":       {`{"v100": {}}`, "a100", `no entry "a100" (nor "a100_unconsolidated")`},
		"bad GPU name":       {`{}`, "../x", `GPU type "../x"`},
		"a key not a job":    {`{"v100": {"ResNet": {"null": 1}}}`, "v100", `job "ResNet": want ('<job type>', <scale factor>)`},
		"a bad scale":        {`{"v100": {"('A3C', two)": {"null": 1}}}`, "v100", `scale factor "two"`},
		"no alone":           {`{"v100": {"('A3C', 1)": {}}}`, "v100", `no "null" member`},
		"alone not a number": {`{"v100": {"('A3C', 1)": {"null": "fast"}}}`, "v100", `throughput alone "fast"`},
		"a pair not two numbers": {`{"v100": {"('A3C', 1)": {"null": 1, "('A3C', 1)": [1]}}}`, "v100",
			"('A3C', 1) with ('A3C', 1): want [together a, together b]"},
	} {
		_, _, err := ConvertThroughputs(strings.NewReader(tc.in), tc.gpu)
		must.ErrorIs(t, err, ErrFormat, must.Sprint(name))
		must.StrContains(t, err.Error(), tc.want, must.Sprint(name))
	}
}

// Floats as Python's repr writes them, rounded as its round does.
func TestPythonFloats(t *testing.T) {
	for x, want := range map[float64]string{0: "0.0", 0.5: "0.5", 2000: "2000.0", 32.353384328946916: "32.353384328946916",
		1e-05: "1e-05", 0.0001: "0.0001", 1.25e16: "1.25e+16", -3: "-3.0"} {
		must.EqOp(t, want, pyRepr(x))
	}
	must.EqOp(t, "2.67", pyRound(2.675, 2), must.Sprint("2.675 is 2.67499... in binary"))
	must.EqOp(t, "1.0", pyRound(0.99999, 4))
	must.EqOp(t, "32.35338", pyRound(32.353384328946916, 5))
	must.EqOp(t, "0.0", normOf(3, 0))
}
