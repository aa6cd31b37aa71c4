package service

import (
	"maps"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
)

// The gauges an operator alerts on and draws (deploy/grafana/gpushare.json),
// computed when Prometheus scrapes /metrics:
//
//   - per GPU, the shares it offers and those in use, its health and the
//     utilisation the service last sampled (gpustats.go): built as /v1/gpus
//     is, from the model's nodes and live allocations, whose lists are
//     copied under the model's lock (pointers, no more) and read after it;
//   - per namespace, the groups that wait or were refused (/v1/groups) and
//     the groups in each lifecycle state: what the last decision pass
//     published (publishFigures), read without the model's lock, and shown
//     by the replica that decides only (a follower's would be stale).
//
// Their labels are bounded by the cluster: a GPU's series carry its node's
// name, its UUID, its index and its model (one series per GPU and gauge);
// a group's carry its namespace and its state (a fixed list), never a job.

// lifecycleStates are the lifecycle states each namespace's series start
// with, at 0 (a state added to package lifecycle is counted all the same).
var lifecycleStates = []lifecycle.State{lifecycle.Template, lifecycle.Stopped, lifecycle.Waiting, lifecycle.PinnedUnplaced,
	lifecycle.Running, lifecycle.Scaling, lifecycle.Canarying, lifecycle.Migrating, lifecycle.Done, lifecycle.Unmanaged}

// waitingStates are /v1/groups' states.
var waitingStates = []string{"pending", "refused"}

// groupFigures are what a pass found of the groups, by namespace.
type groupFigures struct {
	// waiting counts, per namespace, the groups /v1/groups lists, by its
	// state (pending, refused).
	waiting map[string]map[string]int
	// stages counts, per namespace, the groups in each lifecycle state.
	stages map[string]map[lifecycle.State]int
}

// figures is the collector of the gauges above.
type figures struct {
	loop   *loop
	groups atomic.Pointer[groupFigures]
	// follows reports whether this replica follows another (it shows no
	// group figures then).
	follows func() bool

	gpuShares, gpuUsed, gpuHealthy, gpuUtil, gpuMemUsed, unhealthy, waiting, stages *prometheus.Desc
}

var gpuLabels = []string{"node", "gpu", "index", "model"}

func newFigures(l *loop, follows func() bool) *figures {
	return &figures{loop: l, follows: follows,
		gpuShares: prometheus.NewDesc("gpushare_gpu_shares",
			"Shares a GPU offers (of a GPU in MIG mode offered whole, its compute slices), by node name, GPU UUID, index and model: the capacity /v1/gpus shows.", gpuLabels, nil),
		gpuUsed: prometheus.NewDesc("gpushare_gpu_shares_used",
			"Shares of a GPU that live allocations hold, any namespace's (slices of a MIG GPU offered whole).", gpuLabels, nil),
		gpuHealthy: prometheus.NewDesc("gpushare_gpu_healthy",
			"1 while the device plugin reports the GPU healthy, 0 while it does not (an XID, a lost GPU, the MPS daemon down): nothing new is placed on it.", gpuLabels, nil),
		gpuUtil: prometheus.NewDesc("gpushare_gpu_utilization_ratio",
			"Share of time the GPU's SMs were busy (0 to 1), as the scheduler last sampled its device stats (observe_interval); absent until a sample was read.", gpuLabels, nil),
		gpuMemUsed: prometheus.NewDesc("gpushare_gpu_memory_used_bytes",
			"GPU memory in use, as the scheduler last sampled its device stats; absent until a sample was read.", gpuLabels, nil),
		unhealthy: prometheus.NewDesc("gpushare_unhealthy_gpus",
			"GPUs the device plugin reports unhealthy (gpushare_gpu_healthy 0): alert while above 0.", nil, nil),
		waiting: prometheus.NewDesc("gpushare_waiting_groups",
			"Groups of each managed namespace that wait (state pending) or were refused for good (state refused) after the last pass: /v1/groups. Shown by the deciding replica.",
			[]string{"namespace", "state"}, nil),
		stages: prometheus.NewDesc("gpushare_groups",
			"Groups that ask for gpushare shares, by managed namespace and lifecycle state (waiting, pinned-unplaced, running, migrating, ...: `gpushare job status`), as the last pass found them. Shown by the deciding replica.",
			[]string{"namespace", "state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (f *figures) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.gpuShares, f.gpuUsed, f.gpuHealthy, f.gpuUtil, f.gpuMemUsed, f.unhealthy, f.waiting, f.stages} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (f *figures) Collect(ch chan<- prometheus.Metric) {
	f.collectGPUs(ch)
	if f.follows != nil && f.follows() {
		return
	}
	g := f.groups.Load()
	if g == nil {
		return
	}
	for _, ns := range slices.Sorted(maps.Keys(g.waiting)) {
		for _, st := range slices.Sorted(maps.Keys(g.waiting[ns])) {
			ch <- prometheus.MustNewConstMetric(f.waiting, prometheus.GaugeValue, float64(g.waiting[ns][st]), ns, st)
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(g.stages)) {
		for _, st := range slices.Sorted(maps.Keys(g.stages[ns])) {
			ch <- prometheus.MustNewConstMetric(f.stages, prometheus.GaugeValue, float64(g.stages[ns][st]), ns, string(st))
		}
	}
}

// collectGPUs sends each GPU's series and the count of unhealthy GPUs.
func (f *figures) collectGPUs(ch chan<- prometheus.Metric) {
	l := f.loop
	l.mu.Lock()
	nodes, allocs := nodesNow(l.state), liveAllocsNow(l.state)
	l.mu.Unlock()
	m := gpumap.Build(nodes, allocs)
	m.WithStats(l.history.Latest)
	down := 0
	for _, n := range m.Nodes {
		name := n.Name
		if name == "" {
			name = n.ID
		}
		for _, g := range n.GPUs {
			labels := []string{name, g.UUID, strconv.Itoa(g.Index), n.Model}
			healthy := 1.0
			if !g.Healthy {
				healthy = 0
				down++
			}
			ch <- prometheus.MustNewConstMetric(f.gpuShares, prometheus.GaugeValue, float64(g.Shares), labels...)
			ch <- prometheus.MustNewConstMetric(f.gpuUsed, prometheus.GaugeValue, float64(g.Used), labels...)
			ch <- prometheus.MustNewConstMetric(f.gpuHealthy, prometheus.GaugeValue, healthy, labels...)
			if g.Stats != nil {
				ch <- prometheus.MustNewConstMetric(f.gpuUtil, prometheus.GaugeValue, g.Stats.UtilizationPct/100, labels...)
				ch <- prometheus.MustNewConstMetric(f.gpuMemUsed, prometheus.GaugeValue, float64(g.Stats.MemoryUsedMiB)*(1<<20), labels...)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(f.unhealthy, prometheus.GaugeValue, float64(down))
}

// publishFigures counts, at the end of a pass, the groups of the managed
// namespaces that wait (pending: the pass's reasons) or were refused, and
// every group's lifecycle state, for the next scrapes. Run by the loop,
// which owns the pass's stages; it holds s.mu only to read the refusals.
func (s *loop) publishFigures(pending map[decide.Key]string) {
	if s.metrics == nil || s.metrics.figures == nil {
		return
	}
	managed := s.namespaces()
	g := &groupFigures{waiting: map[string]map[string]int{}, stages: map[string]map[lifecycle.State]int{}}
	seen := func(ns string) {
		if _, ok := g.waiting[ns]; ok {
			return
		}
		g.waiting[ns] = map[string]int{}
		for _, st := range waitingStates {
			g.waiting[ns][st] = 0
		}
		g.stages[ns] = map[lifecycle.State]int{}
		for _, st := range lifecycleStates {
			g.stages[ns][st] = 0
		}
	}
	for k, r := range s.passStages() {
		if ns := allocNamespace(k.Namespace); managed.has(ns) {
			seen(ns)
			g.stages[ns][r.State]++
		}
	}
	s.mu.Lock()
	for k := range pending {
		ns := allocNamespace(k.Namespace)
		if !managed.has(ns) {
			continue
		}
		seen(ns)
		if _, never := s.refusals.refusedForGood(k); never {
			g.waiting[ns]["refused"]++
		} else {
			g.waiting[ns]["pending"]++
		}
	}
	s.mu.Unlock()
	s.metrics.figures.groups.Store(g)
}
