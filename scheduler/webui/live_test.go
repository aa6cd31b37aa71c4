package webui

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/shoenig/test/must"
)

// Each GPU shows its latest stats in words and a sparkline of its
// utilisation over the hour; each job using it a sparkline of its own.
// A GPU without stats shows neither.
func TestOverviewShowsLiveStatsAndSparklines(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := &gpumap.Map{Nodes: []gpumap.Node{{ID: "n1", Name: "dgx", Status: "ready", Model: "V100", GPUs: []gpumap.GPU{
		{UUID: "GPU-a", Shares: 100, Used: 25, Healthy: true,
			Users: []gpumap.Usage{{AllocID: "a1", Namespace: "ml", Job: "train", Group: "g", Shares: 25}},
			Stats: &gpumap.Stats{At: now, UtilizationPct: 62, MemoryUsedMiB: 4000, MemoryTotalMiB: 16384, PowerW: 151, TemperatureC: 47}},
		{UUID: "GPU-b", Index: 1, Shares: 100, Healthy: true},
	}}}}
	h := History{Span: time.Hour,
		GPUs: map[string][]gpuhistory.Point{"GPU-a": {{At: now.Add(-time.Hour), Value: 0}, {At: now.Add(-30 * time.Minute), Value: 50}, {At: now, Value: 62}}},
		Jobs: map[gpuhistory.JobKey][]gpuhistory.Point{{Namespace: "ml", Job: "train"}: {{At: now.Add(-time.Minute), Value: 30}, {At: now, Value: 40}}}}
	body := render(t, Overview{Map: m, History: h, Now: now})
	must.StrContains(t, body, `<span class="stats">62% busy · 3.9 GiB of 16.0 GiB memory used · 151 W · 47 °C</span>`)
	must.EqOp(t, 1, strings.Count(body, `class="stats"`)) // GPU-b has none
	must.EqOp(t, 2, strings.Count(body, `<svg class="spark"`))
	// the GPU's: x over the hour, y from 0 at the bottom to 100% at the top
	must.StrContains(t, body, `aria-label="GPU utilisation over the last hour: 3 samples, now 62%" data-points="3"`)
	must.StrContains(t, body, `<polyline points="0.0,23.0 60.0,12.0 120.0,9.4"/>`)
	// the job's history is a minute long: x spans that minute
	must.StrContains(t, body, `aria-label="job&#39;s GPU utilisation over the last 1m00s: 2 samples, now 40%"`)
}

// A sparkline is read without hovering: it carries its scale (0 to the
// top of its y axis) and says what it draws, in what unit, over how many
// samples.
func TestSparklineHasScaleAndLabel(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := &gpumap.Map{Nodes: []gpumap.Node{{ID: "n1", Name: "dgx", Status: "ready", Model: "V100", GPUs: []gpumap.GPU{
		{UUID: "GPU-a", Shares: 100, Healthy: true, Stats: &gpumap.Stats{At: now, UtilizationPct: 62}}}}}}
	h := History{Span: time.Hour, GPUs: map[string][]gpuhistory.Point{"GPU-a": {{At: now.Add(-time.Hour), Value: 0}, {At: now.Add(-30 * time.Minute), Value: 50}, {At: now, Value: 62}}}}
	body := render(t, Overview{Map: m, History: h, Now: now})
	must.StrContains(t, body, `<span class="spark-scale" title="y axis: 0 to 100%">0–100%</span>`)
	must.StrContains(t, body, `<span class="spark-label">GPU utilisation %, last 3 samples, over the last hour</span>`)
	must.StrContains(t, body, `<line class="axis top"`)
}

// A job's page draws its utilisation.
func TestJobPageSparkline(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	body := render(t, Job{Namespace: "ml", ID: "train", Now: now, Span: time.Hour,
		Utilization: []gpuhistory.Point{{At: now.Add(-time.Minute), Value: 150}, {At: now, Value: 75}}})
	must.StrContains(t, body, `<p class="live"><span class="sparkline"><svg class="spark"`)
	// its scale: over 100%, the top is the largest value
	must.StrContains(t, body, `<span class="spark-scale" title="y axis: 0 to 150%">0–150%</span>`)
	must.StrContains(t, body, `now 75%`)
	// over 100% (several GPUs): the top is the largest value
	must.StrContains(t, body, `<polyline points="0.0,1.0 120.0,12.0"/>`)
	must.StrNotContains(t, render(t, Job{Namespace: "ml", ID: "idle", Now: now, Span: time.Hour}), `class="spark"`)
}

// Each group's state is said in plain words, its lifecycle when known.
func TestJobPageSaysStatesInWords(t *testing.T) {
	body := render(t, Job{Namespace: "ml", ID: "train", Now: time.Unix(0, 0), Groups: []JobGroup{
		{Name: "a", State: "pinned", Lifecycle: "running", LifecycleWhy: "all 2 allocation(s) run"},
		{Name: "b", State: "pending", Lifecycle: "waiting", Reason: "no GPU has 60 shares free"},
		{Name: "c", State: "not-gpushare", Lifecycle: "not-gpushare", Reason: "it asks for no nvidia/gpushare device"},
		{Name: "d", State: "refused", Reason: "too big"},
	}})
	must.StrContains(t, body, "Running where gpushare placed it. <span class=\"quiet\">(all 2 allocation(s) run)</span>")
	must.StrContains(t, body, "Waiting for gpushare to place it.")
	must.StrContains(t, body, "<dt>Why it waits</dt><dd class=\"reason\">no GPU has 60 shares free</dd>")
	must.StrContains(t, body, "Not followed by gpushare: Nomad alone places it.")
	must.StrContains(t, body, "<dt>Why gpushare does not follow it</dt><dd class=\"reason\">it asks for no nvidia/gpushare device</dd>")
	must.StrContains(t, body, "Refused: no state of this cluster could hold it.")
}

// Before a GPU's first utilisation sample the page says when it appears,
// instead of nothing; once sampled, the hint goes.
func TestPageHintsBeforeTheFirstSample(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	m := &gpumap.Map{Nodes: []gpumap.Node{{ID: "n1", Name: "gpu-a", Status: "ready", Model: "H100", Sharing: "mps",
		GPUs: []gpumap.GPU{{UUID: "GPU-1", Shares: 100, Healthy: true}}}}}
	body := render(t, Overview{Map: m, Now: now, History: History{Span: time.Hour, Interval: 30 * time.Second}})
	must.StrContains(t, body, "utilisation appears after the first sample, every 30s")
	m.Nodes[0].GPUs[0].Stats = &gpumap.Stats{At: now, UtilizationPct: 40}
	body = render(t, Overview{Map: m, Now: now, History: History{Span: time.Hour, Interval: 30 * time.Second,
		GPUs: map[string][]gpuhistory.Point{"GPU-1": {{At: now, Value: 40}}}}})
	must.StrNotContains(t, body, "utilisation appears after the first sample")
}

// A pinned job's page says when its utilisation appears before its first
// sample; a job that waits says nothing of it.
func TestJobPageHintsBeforeTheFirstSample(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	pinned := []JobGroup{{Name: "g", State: "pinned"}}
	body := render(t, Job{Namespace: "ml", ID: "train", Now: now, Span: time.Hour, Interval: 30 * time.Second, Groups: pinned})
	must.StrContains(t, body, "utilisation appears after the first sample, every 30s")
	body = render(t, Job{Namespace: "ml", ID: "train", Now: now, Span: time.Hour, Interval: 30 * time.Second, Groups: pinned,
		Utilization: []gpuhistory.Point{{At: now, Value: 10}}})
	must.StrNotContains(t, body, "utilisation appears after the first sample")
	body = render(t, Job{Namespace: "ml", ID: "big", Now: now, Span: time.Hour, Groups: []JobGroup{{Name: "g", State: "pending"}}})
	must.StrNotContains(t, body, "utilisation appears after the first sample")
}
