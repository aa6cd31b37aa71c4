package report

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Bars is a grouped bar chart: one group of bars per category, one bar per
// series in each group.
type Bars struct {
	Title, YLabel string
	// Categories name the groups along the X axis.
	Categories []string
	// Series hold one value per category (NaN: no bar).
	Series []BarSeries
	// RefY draws a dashed horizontal line at this value when it is not 0
	// (for example 1 on a chart of ratios).
	RefY float64
}

// BarSeries is one bar in each group.
type BarSeries struct {
	Name   string
	Values []float64
}

// Save writes the chart to path; the extension (.svg or .png) picks the
// format. The chart widens with the number of bars.
func (b Bars) Save(path string) error {
	if err := checkFormat(path); err != nil {
		return err
	}
	for _, s := range b.Series {
		if len(s.Values) != len(b.Categories) {
			return fmt.Errorf("plot %s: series %s has %d values for %d categories", path, s.Name, len(s.Values), len(b.Categories))
		}
	}
	pl := plot.New()
	pl.Title.Text = b.Title
	pl.Y.Label.Text = b.YLabel
	pl.Add(plotter.NewGrid())
	pl.Legend.Top = true
	pl.Legend.Left = false
	width := vg.Points(7)
	n := len(b.Series)
	top := b.RefY
	for i, s := range b.Series {
		vals := make(plotter.Values, len(s.Values))
		for k, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				vals[k] = v
				top = max(top, v)
			}
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("plot %s: series %s: %w", path, s.Name, err)
		}
		bc.LineStyle.Width = 0
		bc.Color = plotutil.Color(i)
		bc.Offset = vg.Length(float64(i)-float64(n-1)/2) * width
		pl.Add(bc)
		pl.Legend.Add(s.Name, bc)
	}
	if b.RefY != 0 && len(b.Categories) > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: b.RefY}, {X: float64(len(b.Categories)) - 0.5, Y: b.RefY}})
		if err != nil {
			return fmt.Errorf("plot %s: reference line: %w", path, err)
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		pl.Add(l)
	}
	pl.NominalX(b.Categories...)
	if top > 0 {
		pl.Y.Min, pl.Y.Max = 0, top*(1.15+0.06*float64(n)) // room for the legend above the bars
	}
	w := max(18*vg.Centimeter, vg.Length(len(b.Categories)*(n+2))*width)
	return pl.Save(w, 12*vg.Centimeter, path)
}
