package service

import (
	"cmp"
	"strconv"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/prometheus/client_golang/prometheus"
)

// AllocTimeslice is a time-sliced allocation's figures in /v1/jobs/<id>
// (GroupStatus.Timeslice; issue 46 part 2): the quantum its task runs per
// turn, the time its launches waited for their turn in all (suspended,
// its memory kept) and the turns it was given, as the device plugin last
// reported them (every observe_interval).
type AllocTimeslice struct {
	Alloc            string  `json:"allocation"`
	QuantumSeconds   float64 `json:"quantum_seconds"`
	SuspendedSeconds float64 `json:"suspended_seconds"`
	Turns            uint64  `json:"turns"`
}

func allocTimeslice(t gpuhistory.AllocTimeslice) AllocTimeslice {
	return AllocTimeslice{Alloc: t.Alloc, QuantumSeconds: t.Quantum.Seconds(), SuspendedSeconds: t.Suspended.Seconds(), Turns: t.Turns}
}

// timesliceFigures are the time-sliced GPUs' series, computed when
// Prometheus scrapes /metrics from what the service last sampled
// (gpustats.go), one series each per GPU that runs time-sliced
// allocations, labelled as the GPU series are (node, gpu, index, model):
// /metrics is open without a token and names no job; the figures of each
// allocation are in /v1/jobs/<id> and on the job's page.
type timesliceFigures struct {
	loop                              *loop
	allocs, suspended, quantum, turns *prometheus.Desc
}

func newTimesliceFigures(l *loop) *timesliceFigures {
	return &timesliceFigures{loop: l,
		allocs: prometheus.NewDesc("gpushare_timeslice_allocations",
			"Time-sliced allocations (gpushare.timeslice) on the GPU whose device plugin reports their time-slicing, as last sampled (observe_interval).", gpuLabels, nil),
		suspended: prometheus.NewDesc("gpushare_timeslice_suspended_seconds",
			"Time the GPU's live time-sliced allocations' kernel launches waited for their turn (suspended, memory kept), summed over them, each since it began: falls when one ends.", gpuLabels, nil),
		quantum: prometheus.NewDesc("gpushare_timeslice_quantum_seconds",
			"The quantum of the GPU's time-sliced allocations: a turn on the GPU (the least of theirs).", gpuLabels, nil),
		turns: prometheus.NewDesc("gpushare_timeslice_turns",
			"Turns the GPU's live time-sliced allocations were given, summed over them.", gpuLabels, nil),
	}
}

// Describe implements prometheus.Collector.
func (f *timesliceFigures) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.allocs, f.suspended, f.quantum, f.turns} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (f *timesliceFigures) Collect(ch chan<- prometheus.Metric) {
	type sum struct {
		n                  int
		suspended, quantum float64
		turns              uint64
	}
	by := map[string]*sum{}
	for _, t := range f.loop.history.Timeslices() {
		s := by[t.GPU]
		if s == nil {
			s = &sum{quantum: t.Quantum.Seconds()}
			by[t.GPU] = s
		}
		s.n++
		s.suspended += t.Suspended.Seconds()
		s.quantum = min(s.quantum, t.Quantum.Seconds())
		s.turns += t.Turns
	}
	if len(by) == 0 {
		return
	}
	l := f.loop
	l.mu.Lock()
	nodes, allocs := nodesNow(l.state), liveAllocsNow(l.state)
	l.mu.Unlock()
	for _, n := range gpumap.Build(nodes, allocs).Nodes {
		for _, g := range n.GPUs {
			s := by[g.UUID]
			if s == nil {
				continue
			}
			labels := []string{cmp.Or(n.Name, n.ID), g.UUID, strconv.Itoa(g.Index), n.Model}
			ch <- prometheus.MustNewConstMetric(f.allocs, prometheus.GaugeValue, float64(s.n), labels...)
			ch <- prometheus.MustNewConstMetric(f.suspended, prometheus.GaugeValue, s.suspended, labels...)
			ch <- prometheus.MustNewConstMetric(f.quantum, prometheus.GaugeValue, s.quantum, labels...)
			ch <- prometheus.MustNewConstMetric(f.turns, prometheus.GaugeValue, float64(s.turns), labels...)
		}
	}
}
