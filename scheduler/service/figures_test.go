package service

import (
	"maps"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// metricSample is one sample of /metrics: its name, labels and value.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeSamples reads /metrics in Prometheus' text format.
func scrapeSamples(t *testing.T, s *Service) []metricSample {
	t.Helper()
	rr := httptest.NewRecorder()
	s.Handler().ServeHTTP(rr, apiRequest("GET", "/metrics", nil))
	must.EqOp(t, 200, rr.Code)
	var out []metricSample
	for _, line := range strings.Split(rr.Body.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		must.Positive(t, sp, must.Sprintf("sample line %q", line))
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		must.NoError(t, err)
		one := metricSample{name: line[:sp], labels: map[string]string{}, value: v}
		if name, rest, ok := strings.Cut(line[:sp], "{"); ok {
			one.name = name
			for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
				k, val, ok := strings.Cut(kv, "=")
				must.True(t, ok, must.Sprintf("label %q of %q", kv, line))
				one.labels[k] = strings.Trim(val, `"`)
			}
		}
		out = append(out, one)
	}
	return out
}

// findSamples returns the samples of name whose labels include want.
func findSamples(all []metricSample, name string, want map[string]string) []metricSample {
	var out []metricSample
	for _, s := range all {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			match = match && s.labels[k] == v
		}
		if match {
			out = append(out, s)
		}
	}
	return out
}

// sampleValue is the value of the one sample of name with labels want.
func sampleValue(t *testing.T, all []metricSample, name string, want map[string]string) float64 {
	t.Helper()
	got := findSamples(all, name, want)
	must.SliceLen(t, 1, got, must.Sprintf("one metricSample %s%v in /metrics", name, want))
	return got[0].value
}

// A small cluster: one dgx1 (8 V100s of 100 shares), a job holding 25
// shares of one GPU, another GPU reported unhealthy, groups that wait in
// two namespaces and one refused for good. /metrics says, per GPU, the
// shares it offers and those in use, its health and its utilisation;
// per namespace, the groups waiting and refused and those in each
// lifecycle state; and how many GPUs are unhealthy.
func TestMetricsShowSharesGroupsAndHealth(t *testing.T) {
	f := &gpuStatsNomad{fakeNomad: &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}, namespaces: []string{"team-a"}},
		proc: map[string]int64{}}
	clock := time.Unix(100000, 0)
	s, err := newService(config.Default(), hclog.NewNullLogger(), f, func() time.Time { return clock })
	must.NoError(t, err)
	f.put(gated("quarter", 25))
	f.put(gated("toolarge", 900)) // more than the node has: refused for good
	other := gated("other", 800)  // every GPU whole: waits for the quarter
	other.Namespace = ptr("team-a")
	f.put(other)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	rec, ok := pin.ParseRecord(f.jobs["quarter"], "g")
	must.True(t, ok)
	must.SliceLen(t, 1, rec.GPUs)
	f.runningOn("quarter", "alloc-quarter", rec.Shares)
	// another GPU goes bad: the plugin reports its shares unhealthy
	gpus := nodeGPUs(f.nodes[0])
	bad := gpus[0]
	if bad == rec.GPUs[0] {
		bad = gpus[1]
	}
	f.nodes[0].NodeResources.Devices[0].Instances = []*api.NodeDevice{
		{ID: devicefn.ShareIDs(bad, 100)[0], Healthy: false, HealthDescription: "XID 79"}}
	f.index++
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	f.util = 40
	s.sampler.sampleGPUs(t.Context())

	m := scrapeSamples(t, s)
	used := map[string]string{"node": "dgx1", "gpu": rec.GPUs[0], "model": "Tesla V100-SXM2-16GB"}
	must.EqOp(t, 25.0, sampleValue(t, m, "gpushare_gpu_shares_used", used))
	must.EqOp(t, 100.0, sampleValue(t, m, "gpushare_gpu_shares", used))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_gpu_healthy", used))
	must.EqOp(t, 0.4, sampleValue(t, m, "gpushare_gpu_utilization_ratio", used))
	must.EqOp(t, 4000.0*(1<<20), sampleValue(t, m, "gpushare_gpu_memory_used_bytes", used))
	must.EqOp(t, 0.0, sampleValue(t, m, "gpushare_gpu_healthy", map[string]string{"gpu": bad}))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_unhealthy_gpus", nil))
	// one metricSample per GPU, each with its index
	all := findSamples(m, "gpushare_gpu_shares", nil)
	must.SliceLen(t, 8, all)
	indexes := map[string]bool{}
	total, inUse := 0.0, 0.0
	for _, g := range all {
		must.MapContainsKeys(t, g.labels, []string{"node", "gpu", "index", "model"})
		indexes[g.labels["index"]] = true
		total += g.value
	}
	must.MapLen(t, 8, indexes)
	for _, g := range findSamples(m, "gpushare_gpu_shares_used", nil) {
		inUse += g.value
	}
	must.EqOp(t, 800.0, total)
	must.EqOp(t, 25.0, inUse)

	// groups, by namespace and state
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_waiting_groups", map[string]string{"namespace": "default", "state": "refused"}))
	must.EqOp(t, 0.0, sampleValue(t, m, "gpushare_waiting_groups", map[string]string{"namespace": "default", "state": "pending"}))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_waiting_groups", map[string]string{"namespace": "team-a", "state": "pending"}))
	must.EqOp(t, 0.0, sampleValue(t, m, "gpushare_waiting_groups", map[string]string{"namespace": "team-a", "state": "refused"}))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_groups", map[string]string{"namespace": "default", "state": "running"}))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_groups", map[string]string{"namespace": "default", "state": "waiting"}))
	must.EqOp(t, 1.0, sampleValue(t, m, "gpushare_groups", map[string]string{"namespace": "team-a", "state": "waiting"}))
	// every state of a namespace is a metricSample, at 0 until a group is in it
	for _, st := range lifecycleStates {
		got := findSamples(m, "gpushare_groups", map[string]string{"namespace": "team-a", "state": string(st)})
		must.SliceLen(t, 1, got, must.Sprintf("state %s", st))
	}
	must.EqOp(t, 0.0, sampleValue(t, m, "gpushare_groups", map[string]string{"namespace": "team-a", "state": "pinned-unplaced"}))
	// the totals agree with the older gauges
	must.EqOp(t, 1.0, counterValue(t, s, "gpushare_refused_groups"))
	must.EqOp(t, 1.0, counterValue(t, s, "gpushare_pending_groups"))
}

// A replica that follows shows the GPUs (it watches the cluster too) but
// not the groups: it does not decide, so what it last published is stale.
func TestMetricsOfAFollowerShowNoGroups(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("quarter", 25))
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())
	must.SliceNotEmpty(t, findSamples(scrapeSamples(t, s), "gpushare_groups", nil))
	s.lease.need.Store(true) // campaigns, and does not lead
	m := scrapeSamples(t, s)
	must.SliceEmpty(t, findSamples(m, "gpushare_groups", nil))
	must.SliceEmpty(t, findSamples(m, "gpushare_waiting_groups", nil))
	must.SliceLen(t, 8, findSamples(m, "gpushare_gpu_shares", nil))
}

// Labelled counters are metricSample from the start, at 0, for every value of
// their label: an alert or a rate() on them works before they first count.
func TestLabelledCountersStartAtZero(t *testing.T) {
	s := newTestService(t, &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}})
	m := scrapeSamples(t, s)
	want := map[string]map[string][]string{
		"gpushare_decisions_total":       {"outcome": {"placed", "refused", "never"}},
		"gpushare_restarts_total":        {"reason": restartReasons},
		"gpushare_elastic_resizes_total": {"direction": {"grow", "shrink"}},
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		for label, values := range want[name] {
			for _, v := range values {
				must.EqOp(t, 0.0, sampleValue(t, m, name, map[string]string{label: v}))
			}
		}
	}
	// and before any pass: no GPU unhealthy, every GPU's shares free
	must.EqOp(t, 0.0, sampleValue(t, m, "gpushare_unhealthy_gpus", nil))
	for _, g := range findSamples(m, "gpushare_gpu_shares_used", nil) {
		must.EqOp(t, 0.0, g.value)
	}
}
