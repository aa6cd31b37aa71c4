package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestTable(t *testing.T) {
	tb := Table{Header: []string{"policy", "alloc"}, Rows: [][]string{{"fgd", F(95.391)}, {"random", F(math.NaN())}}}
	must.EqOp(t, "| policy | alloc |\n|---|---|\n| fgd | 95.39 |\n| random | - |\n", tb.Markdown())
	must.StrContains(t, tb.Text(), "random  -")
	p := filepath.Join(t.TempDir(), "t.csv")
	must.NoError(t, tb.WriteCSV(p))
	b, err := os.ReadFile(p)
	must.NoError(t, err)
	must.EqOp(t, "policy,alloc\nfgd,95.39\nrandom,-\n", string(b))
}

func TestPlotSave(t *testing.T) {
	dir := t.TempDir()
	p := Plot{Title: "t", XLabel: "x", YLabel: "y", Series: []Series{
		{Name: "a", X: []float64{0, 1, 2}, Y: []float64{0, 1, math.NaN()}},
		{Name: "b", X: []float64{0, 1}, Y: []float64{1, 0}, Dashed: true},
	}}
	saveBoth(t, dir, "p", p.Save)
	b, _ := os.ReadFile(filepath.Join(dir, "p.svg"))
	must.True(t, strings.HasPrefix(string(b), "<?xml"))
	must.Error(t, p.Save(filepath.Join(dir, "p.pdf")))
}

func TestNumJSON(t *testing.T) {
	b, err := json.Marshal([]Num{95.39, Num(math.NaN()), Num(math.Inf(1))})
	must.NoError(t, err)
	must.EqOp(t, "[95.39,null,null]", string(b))
}

func TestBarsSave(t *testing.T) {
	dir := t.TempDir()
	b := Bars{Title: "t", YLabel: "avg JCT / exclusive", Categories: []string{"a", "b", "c"}, RefY: 1, Series: []BarSeries{
		{Name: "x", Values: []float64{1, 0.5, math.NaN()}},
		{Name: "y", Values: []float64{0.9, 0.4, 0.7}},
	}}
	saveBoth(t, dir, "b", b.Save)
	svg, _ := os.ReadFile(filepath.Join(dir, "b.svg"))
	for _, s := range []string{"avg JCT / exclusive", ">a<", ">c<", ">x<", ">y<"} {
		must.StrContains(t, string(svg), s)
	}
	must.Error(t, b.Save(filepath.Join(dir, "b.pdf")))
	b.Series[0].Values = []float64{1}
	must.ErrorContains(t, b.Save(filepath.Join(dir, "b.svg")), "series x has 1 values for 3 categories")
}

// saveBoth saves a plot as name.svg and name.png in dir and checks both
// files have content.
func saveBoth(t *testing.T, dir, name string, save func(path string) error) {
	t.Helper()
	for _, ext := range []string{".svg", ".png"} {
		path := filepath.Join(dir, name+ext)
		must.NoError(t, save(path))
		st, err := os.Stat(path)
		must.NoError(t, err)
		must.Greater(t, 100, st.Size())
	}
}
