package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Table is a table with a header.
type Table struct {
	Header []string
	Rows   [][]string
}

// Markdown renders the table as GitHub markdown.
func (t Table) Markdown() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.Header, " | ") + " |\n|")
	for range t.Header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Text renders the table with aligned columns for a terminal.
func (t Table) Text() string {
	w := make([]int, len(t.Header))
	for i, h := range t.Header {
		w[i] = len(h)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(w) {
				w[i] = max(w[i], len(c))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			fmt.Fprintf(&b, "%-*s", w[i], c)
		}
		b.WriteString("\n")
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

// WriteCSV writes the table to path.
func (t Table) WriteCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(t.Header)
	_ = w.WriteAll(t.Rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Num is a number in a machine-readable result: NaN (not measured, for
// example a share of zero pods) and infinities are written as JSON null,
// which encoding/json cannot do for a float64.
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	v := float64(n)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// F formats a number with two decimals ("-" for NaN).
func F[T ~float64](v T) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// F1 formats a number with one decimal ("-" for NaN).
func F1[T ~float64](v T) string {
	if math.IsNaN(float64(v)) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// Series is one line of a plot.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (for reference curves).
	Dashed bool
}

// Plot is a line plot.
type Plot struct {
	Title, XLabel, YLabel string
	Series                []Series
	// YMin and YMax fix the Y range when YMax > YMin.
	YMin, YMax float64
	// XMin and XMax fix the X range when XMax > XMin.
	XMin, XMax float64
	// LogX draws the X axis on a log scale (values <= 0 are left out).
	LogX bool
}

// Save writes the plot to path; the extension (.svg or .png) picks the
// format.
func (p Plot) Save(path string) error {
	if err := checkFormat(path); err != nil {
		return err
	}
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = p.XLabel
	pl.Y.Label.Text = p.YLabel
	pl.Add(plotter.NewGrid())
	pl.Legend.Top = false
	pl.Legend.Left = false
	for i, s := range p.Series {
		var xys plotter.XYs
		for k := range s.X {
			if k < len(s.Y) && !math.IsNaN(s.Y[k]) && !math.IsNaN(s.X[k]) && (!p.LogX || s.X[k] > 0) {
				xys = append(xys, plotter.XY{X: s.X[k], Y: s.Y[k]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("plot %s: series %s: %w", path, s.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		pl.Add(l)
		pl.Legend.Add(s.Name, l)
	}
	if p.LogX {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if p.XMax > p.XMin {
		pl.X.Min, pl.X.Max = p.XMin, p.XMax
	}
	if p.YMax > p.YMin {
		pl.Y.Min, pl.Y.Max = p.YMin, p.YMax
	}
	return pl.Save(18*vg.Centimeter, 12*vg.Centimeter, path)
}

// checkFormat accepts the plot files gonum can write for us: .svg and .png.
func checkFormat(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".svg" && ext != ".png" {
		return fmt.Errorf("plot %s: want a .svg or .png file", path)
	}
	return nil
}
