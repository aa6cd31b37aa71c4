package service

import (
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
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

// timesliceFigures are the time-sliced allocations' series, computed when
// Prometheus scrapes /metrics from what the service last sampled
// (gpustats.go): one series each per live time-sliced allocation, labelled
// by namespace, job, group and allocation ID (bounded by the allocations
// that run time-sliced, at most timeslice.max_per_gpu per GPU).
type timesliceFigures struct {
	history                   *gpuhistory.Store
	suspended, quantum, turns *prometheus.Desc
}

var timesliceLabels = []string{"namespace", "job", "group", "alloc"}

func newTimesliceFigures(h *gpuhistory.Store) *timesliceFigures {
	return &timesliceFigures{history: h,
		suspended: prometheus.NewDesc("gpushare_timeslice_suspended_seconds_total",
			"Time a time-sliced allocation's kernel launches waited for its turn on its GPU (suspended, its memory kept), in all, as its device plugin last reported.", timesliceLabels, nil),
		quantum: prometheus.NewDesc("gpushare_timeslice_quantum_seconds",
			"The quantum a time-sliced allocation runs per turn (the scheduler's timeslice.quantum when it was pinned).", timesliceLabels, nil),
		turns: prometheus.NewDesc("gpushare_timeslice_turns_total",
			"Turns on its GPU a time-sliced allocation was given.", timesliceLabels, nil),
	}
}

// Describe implements prometheus.Collector.
func (f *timesliceFigures) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.suspended
	ch <- f.quantum
	ch <- f.turns
}

// Collect implements prometheus.Collector.
func (f *timesliceFigures) Collect(ch chan<- prometheus.Metric) {
	for _, t := range f.history.Timeslices() {
		labels := []string{t.Namespace, t.Job, t.Group, t.Alloc}
		ch <- prometheus.MustNewConstMetric(f.suspended, prometheus.CounterValue, t.Suspended.Seconds(), labels...)
		ch <- prometheus.MustNewConstMetric(f.quantum, prometheus.GaugeValue, t.Quantum.Seconds(), labels...)
		ch <- prometheus.MustNewConstMetric(f.turns, prometheus.CounterValue, float64(t.Turns), labels...)
	}
}
