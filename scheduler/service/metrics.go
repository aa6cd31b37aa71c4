package service

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg              *prometheus.Registry
	pending          prometheus.Gauge
	refused          prometheus.Gauge
	oldestPending    prometheus.Gauge
	leader           prometheus.Gauge
	decisions        *prometheus.CounterVec
	pins             prometheus.Counter
	conflicts        prometheus.Counter
	preemptions      prometheus.Counter
	confirmations    prometheus.Counter
	reconnects       prometheus.Counter
	resyncs          prometheus.Counter
	events           prometheus.Counter
	pinLatency       prometheus.Histogram
	placementLatency prometheus.Histogram
	stepSeconds      prometheus.Histogram
	pinRequests      prometheus.Counter
	lockHold         prometheus.Histogram
	longestHold      prometheus.Gauge
	restarts         *prometheus.CounterVec
	promotions       prometheus.Counter
	gateOpen         prometheus.Gauge
	// figures are the gauges computed on scrape (figures.go); nil until
	// the service adds them (addFigures).
	figures *figures
}

func newMetrics() *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_pending_groups", Help: "Task groups waiting for gpushare after the last pass, for any reason (capacity, Nomad's rules, a backoff, ...): /v1/groups state pending. 0 on a replica that does not lead."}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_refused_groups", Help: "Task groups refused for good until their job or the cluster's nodes change (a bad request, larger than any node): /v1/groups state refused. 0 on a replica that does not lead."}),
		oldestPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_oldest_pending_seconds",
			Help: "How long the longest-waiting group at the gate has waited since its job was submitted. 0 on a replica that does not lead."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_leader", Help: "1 while this replica holds the leader lock."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpushare_decisions_total", Help: "Placement decisions by outcome."},
			[]string{"outcome"}),
		pins:          prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_pins_total", Help: "Groups pinned into their job."}),
		conflicts:     prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_pin_conflicts_total", Help: "Pins refused because the job changed meanwhile."}),
		preemptions:   prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_preemptions_total", Help: "Opportunistic allocations preempted."}),
		confirmations: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_confirmations_total", Help: "Pinned groups whose allocations appeared."}),
		reconnects:    prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_stream_reconnects_total", Help: "Event stream reconnections."}),
		resyncs:       prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_resyncs_total", Help: "Full listings of the cluster."}),
		events:        prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_events_total", Help: "Events received from Nomad."}),
		pinLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpushare_pin_seconds", Help: "Time to decide and pin one group.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		placementLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpushare_pin_to_alloc_seconds", Help: "Time from pin to the group's first allocation.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		pinRequests: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_pin_requests_total", Help: "Registrations sent to Nomad to pin a group, accepted or not."}),
		lockHold: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpushare_pass_lock_seconds", Help: "Time a decision pass holds the service's lock: to begin and to end its read of the model, which it reads without it (the HTTP API waits meanwhile; events wait only for the read to end).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		longestHold: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_lock_hold_longest_seconds",
			Help: "The longest the service's lock was held at once, by anyone, from the end of the decision pass before to the end of the last: the most the HTTP API, the page and the event stream waited for it."}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpushare_restarts_total",
			Help: "Running allocations a pin made Nomad replace, by reason (repin, scale, adopt, moved): every other pin leaves what runs alone."},
			[]string{"reason"}),
		promotions: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_promotions_total",
			Help: "Deployments the scheduler promoted: those of its own new pin (nothing else changed) whose canaries waited for a promote and were healthy."}),
		gateOpen: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpushare_gate_open_nodes",
			Help: "Nodes whose meta sets gpushare_gate = pending: Nomad places gated groups there by itself, past the scheduler (must be 0)."}),
		stepSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpushare_step_seconds", Help: "Time of one decision step over every waiting group.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	for _, o := range []string{"placed", "refused", "never"} {
		m.decisions.WithLabelValues(o) // every outcome is a series from the start, at 0
	}
	for _, r := range restartReasons {
		m.restarts.WithLabelValues(r) // every reason too
	}
	m.reg.MustRegister(m.pending, m.refused, m.oldestPending, m.leader, m.decisions, m.pins, m.conflicts, m.preemptions, m.confirmations,
		m.reconnects, m.resyncs, m.events, m.pinLatency, m.placementLatency, m.stepSeconds, m.lockHold, m.longestHold, m.pinRequests, m.restarts,
		m.promotions, m.gateOpen)
	return m
}

// restartReasons are gpushare_restarts_total's reasons (moves.go), each a
// series from the start.
var restartReasons = []string{"repin", "scale", "adopt", "moved"}

// addFigures registers the gauges computed on scrape from the loop's model
// and what its passes publish (figures.go); follows says whether this
// replica follows another.
func (m *metrics) addFigures(l *loop, follows func() bool) {
	m.figures = newFigures(l, follows)
	m.reg.MustRegister(m.figures, newTimesliceFigures(l)) // timeslice.go
}
