package service

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// dashboardPanel is what the test reads of a Grafana panel: its title,
// its queries and, for a row, the panels it holds when collapsed.
type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

var (
	metricName = regexp.MustCompile(`\bgpushare_[a-z0-9_]+`)
	byLabels   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	selector   = regexp.MustCompile(`\b(gpushare_[a-z0-9_]+)\{([^}]*)\}`)
	matcher    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// The Grafana dashboard shipped in deploy/grafana queries only metrics the
// scheduler serves, with labels they have: every gpushare_* name of every
// query is a series of /metrics (a histogram's _bucket, _sum and _count
// included) on a service that has decided and sampled its GPUs, every
// label it groups by (but a histogram's le) or matches on is a label of
// a metric the query names. A metric renamed breaks this test, not the
// dashboard.
func TestGrafanaDashboardQueriesServedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/gpushare.json")
	must.NoError(t, err)
	var dash struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	must.NoError(t, json.Unmarshal(b, &dash))
	must.NotEq(t, "", dash.UID)

	labels := servedMetrics(t)

	var walk func(ps []dashboardPanel) int
	walk = func(ps []dashboardPanel) int {
		queries := 0
		for _, p := range ps {
			queries += walk(p.Panels)
			if p.Type != "row" {
				must.SliceNotEmpty(t, p.Targets, must.Sprintf("panel %q has no query", p.Title))
			}
			for _, q := range p.Targets {
				queries++
				names := metricName.FindAllString(q.Expr, -1)
				must.SliceNotEmpty(t, names, must.Sprintf("panel %q: query %q names no gpushare metric", p.Title, q.Expr))
				has := map[string]bool{"le": true}
				for _, n := range names {
					must.MapContainsKey(t, labels, n, must.Sprintf("panel %q: %s is not in /metrics", p.Title, n))
					for l := range labels[n] {
						has[l] = true
					}
				}
				for _, by := range byLabels.FindAllStringSubmatch(q.Expr, -1) {
					for _, l := range strings.Split(by[1], ",") {
						l = strings.TrimSpace(l)
						must.MapContainsKey(t, has, l, must.Sprintf("panel %q: no metric of %q has label %s", p.Title, q.Expr, l))
					}
				}
				for _, sel := range selector.FindAllStringSubmatch(q.Expr, -1) {
					for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
						must.MapContainsKey(t, labels[sel[1]], m[1], must.Sprintf("panel %q: %s has no label %s", p.Title, sel[1], m[1]))
					}
				}
			}
		}
		return queries
	}
	must.Positive(t, walk(dash.Panels))
	// the panels the issue asks for are there
	var titles []string
	var gather func(ps []dashboardPanel)
	gather = func(ps []dashboardPanel) {
		for _, p := range ps {
			titles = append(titles, strings.ToLower(p.Title))
			gather(p.Panels)
		}
	}
	gather(dash.Panels)
	all := strings.Join(titles, "\n")
	for _, want := range []string{"shares in use per node and model", "utilisation", "waiting groups per namespace", "lifecycle state",
		"decisions", "restarts", "pin latency", "elastic resizes", "unhealthy gpus"} {
		must.StrContains(t, all, want)
	}
}

// servedMetrics are the series of /metrics, with their labels, on a
// service that decided (a group pinned, one refused) and sampled its
// GPUs' stats: every metric it serves.
func servedMetrics(t *testing.T) map[string]map[string]bool {
	t.Helper()
	f := &gpuStatsNomad{fakeNomad: &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}, proc: map[string]int64{}}
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return time.Unix(100000, 0) })
	must.NoError(t, err)
	f.put(gated("quarter", 25))
	f.put(gated("toolarge", 900))
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	f.util = 30
	s.sampler.sampleGPUs(t.Context())
	labels := map[string]map[string]bool{} // metric -> its labels
	for _, m := range scrapeSamples(t, s) {
		if labels[m.name] == nil {
			labels[m.name] = map[string]bool{}
		}
		for k := range m.labels {
			labels[m.name][k] = true
		}
	}
	return labels
}

// The reference's Metrics section names every gpushare metric /metrics
// serves (a histogram by its name, without _bucket, _sum or _count).
func TestReferenceDocumentsEveryMetric(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference.md")
	must.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## Metrics\n")
	must.Positive(t, start, must.Sprint("docs/reference.md has no Metrics section"))
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end > 0 {
		section = section[:end+1]
	}
	documented := map[string]bool{}
	for _, n := range metricName.FindAllString(section, -1) {
		documented[n] = true
	}
	for name := range servedMetrics(t) {
		if !strings.HasPrefix(name, "gpushare_") {
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && documented[b] {
				base = b
			}
		}
		must.MapContainsKey(t, documented, base, must.Sprintf("docs/reference.md#metrics does not name %s", name))
	}
}
