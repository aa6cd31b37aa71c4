package webui

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
)

// History is what the GPUs and the jobs did over Span before the page's
// Now: each GPU's utilisation by UUID, each job's summed over its GPUs
// (percent of one GPU).
type History struct {
	Span time.Duration
	// Interval is how often the GPUs are sampled (observe_interval); 0
	// when unknown.
	Interval time.Duration
	GPUs     map[string][]gpuhistory.Point
	Jobs     map[gpuhistory.JobKey][]gpuhistory.Point
}

// Sparkline sizes, in SVG user units.
const (
	sparkW = 120
	sparkH = 24
)

// sparkline draws points over [now-span, now] (or since the first point,
// when the history is shorter) as an inline SVG: a line
// from 0 to top (100%, or the largest value when more), the last point a
// dot. Nothing but numbers goes into the markup.
func sparkline(points []gpuhistory.Point, now time.Time, span time.Duration, what string) template.HTML {
	if len(points) == 0 || span <= 0 {
		return ""
	}
	top := 100.0
	for _, p := range points {
		top = max(top, p.Value)
	}
	// x spans the hour, or since the first point when there is less
	from := now.Add(-span)
	if first := points[0].At; first.After(from) && first.Before(now) {
		from, span = first, now.Sub(first)
	}
	var b strings.Builder
	var lx, ly float64
	for i, p := range points {
		x := float64(sparkW) * float64(p.At.Sub(from)) / float64(span)
		x = min(max(x, 0), sparkW)
		y := sparkH - 1 - (sparkH-2)*max(p.Value, 0)/top
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
		lx, ly = x, y
	}
	last := points[len(points)-1].Value
	label := fmt.Sprintf("%s over the last %s: %d samples, now %.0f%%", what, spanWords(span), len(points), last)
	// visible: the scale (the top of the y axis, the bottom is 0) and what
	// is drawn, with its unit
	caption := fmt.Sprintf("%s %%, last %d sample%s, over the last %s", what, len(points), plural(len(points)), spanWords(span))
	return template.HTML(fmt.Sprintf(`<span class="sparkline"><svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" data-points="%d"><title>%s</title>`+
		`<line class="axis" x1="0" y1="%d" x2="%d" y2="%d"/><line class="axis top" x1="0" y1="1" x2="%d" y2="1"/><polyline points="%s"/><circle cx="%.1f" cy="%.1f" r="2"/></svg>`+
		`<span class="spark-scale" title="y axis: 0 to %.0f%%">0–%.0f%%</span> <span class="spark-label">%s</span></span>`,
		sparkW, sparkH, sparkW, sparkH, template.HTMLEscapeString(label), len(points), template.HTMLEscapeString(label),
		sparkH-1, sparkW, sparkH-1, sparkW, b.String(), lx, ly, top, top, template.HTMLEscapeString(caption)))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func spanWords(d time.Duration) string {
	switch d = d.Round(time.Second); {
	case d == time.Hour:
		return "hour"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// firstSampleHint is what a GPU shows before its first utilisation
// sample, instead of nothing.
func firstSampleHint(interval time.Duration) string {
	if interval <= 0 {
		return "utilisation appears after the first sample"
	}
	return "utilisation appears after the first sample, every " + interval.String()
}

// statsLine says a GPU's latest stats in words.
func statsLine(s *gpumap.Stats) string {
	if s == nil {
		return ""
	}
	parts := []string{fmt.Sprintf("%.0f%% busy", s.UtilizationPct)}
	if s.MemoryTotalMiB > 0 {
		parts = append(parts, fmt.Sprintf("%s of %s memory used", mib(s.MemoryUsedMiB), mib(s.MemoryTotalMiB)))
	} else {
		parts = append(parts, fmt.Sprintf("%s memory used", mib(s.MemoryUsedMiB)))
	}
	parts = append(parts, fmt.Sprintf("%.0f W", s.PowerW))
	if s.TemperatureC > 0 {
		parts = append(parts, fmt.Sprintf("%.0f °C", s.TemperatureC))
	}
	return strings.Join(parts, " · ")
}

func mib(v uint64) string {
	if v >= 1024 {
		return fmt.Sprintf("%.1f GiB", float64(v)/1024)
	}
	return fmt.Sprintf("%d MiB", v)
}
