package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// churnFigures are one run's figures.
type churnFigures struct {
	done, failed, lost  int
	lat                 []time.Duration
	p50, p99            time.Duration
	placements          int
	span                time.Duration // first arrival -> last placement
	perSec, peak        float64       // placements/s over the span, most in 5s
	duration            time.Duration // first arrival -> every job finished
	twice, invalid, bad int
}

func (r *churnRun) figures() churnFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	var f churnFigures
	for _, j := range r.jobs {
		switch {
		case j.done:
			f.done++
		case j.failed:
			f.failed++
		default:
			f.lost++
		}
		if j.latency > 0 {
			f.lat = append(f.lat, j.latency)
		}
	}
	f.p50, f.p99 = percentiles(f.lat)
	created := slices.Clone(r.created)
	slices.SortFunc(created, func(a, b time.Time) int { return a.Compare(b) })
	f.placements = len(created)
	if len(created) > 0 {
		f.span = created[len(created)-1].Sub(r.start)
		f.perSec = float64(len(created)) / max(f.span.Seconds(), 0.001)
		lo := 0
		for hi, at := range created {
			for at.Sub(created[lo]) > 5*time.Second {
				lo++
			}
			f.peak = max(f.peak, float64(hi-lo+1)/5)
		}
	}
	f.duration = r.end.Sub(r.start)
	f.twice, f.invalid, f.bad = len(r.twice), len(r.invalid), len(r.failedAllocs)
	return f
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a.Seconds()/b.Seconds())
}

// report logs the figures in one block of CHURN lines.
func (c *churn) report() {
	g, u, d := c.gated.figures(), c.ungated.figures(), c.devices.figures()
	services, batch, pairs, multi := 0, 0, 0, 0
	for _, j := range c.gated.jobs {
		if j.batch {
			batch++
		} else {
			services++
		}
		if j.count > 1 {
			pairs++
		}
		if j.shares > 100 {
			multi++
		}
	}
	shares := 0
	for _, n := range c.total {
		shares += n
	}
	last := c.gated.jobs[len(c.gated.jobs)-1].at
	var same []time.Duration // the gated latencies of the baseline's jobs
	c.gated.mu.Lock()
	for _, j := range c.gated.jobs[:len(c.ungated.jobs)] {
		if j.latency > 0 {
			same = append(same, j.latency)
		}
	}
	c.gated.mu.Unlock()
	g50, g99 := percentiles(same)
	pins := schedPinsDelta(c)
	stalled := ""
	if c.ungated.stalled {
		stalled = fmt.Sprintf(" (no job finished for %s: the rest left unfinished)", liveness)
	}
	lines := []string{
		fmt.Sprintf("CHURN %d jobs (%d batch of 1-3s, %d services stopped after 1-3s running; %d groups of count 2; %d multi-GPU; 10/25/50/100/200/400 shares) on %d clients, %d GPUs (%d shares), arriving over %s in waves of %s at %.0f/s and %s at %.0f/s",
			len(c.gated.jobs), batch, services, pairs, multi, len(loadClients), len(c.total), shares, last.Round(time.Second), churnWave, churnHigh, churnWave, churnLow),
		fmt.Sprintf("CHURN gated: %d completed, %d lost, %d failed allocations; shares given twice %d, invalid %d; all finished in %s; %d services stopped again (Nomad undid the stop)",
			g.done, g.lost+g.failed, g.bad, g.twice, g.invalid, g.duration.Round(time.Second), c.gated.restops),
		fmt.Sprintf("CHURN ungated, Nomad alone without the GPU ask (the baseline): %d completed, %d failed (failed allocations %d), %d unfinished%s; finished in %s",
			u.done, u.failed, u.bad, u.lost, stalled, u.duration.Round(time.Second)),
		fmt.Sprintf("CHURN ungated, Nomad alone with the GPU ask (the first %d jobs): %d completed, %d failed (failed allocations %d), %d unfinished; shares given twice %d, invalid %d (neither a fraction of one GPU nor whole GPUs); first failure: %s",
			len(c.devices.jobs), d.done, d.failed, d.bad, d.lost, d.twice, d.invalid, c.firstFailure(c.devices)),
		fmt.Sprintf("CHURN registration -> running (last task started): gated p50=%s p99=%s over %d jobs; the first %d: gated p50=%s p99=%s, Nomad alone p50=%s p99=%s over %d; ratio gated/Nomad alone on the same jobs p50 %s, p99 %s",
			g.p50, g.p99, len(g.lat), len(c.ungated.jobs), g50, g99, u.p50, u.p99, len(u.lat), ratio(g50, u.p50), ratio(g99, u.p99)),
		fmt.Sprintf("CHURN placements: gated %d in %s = %.1f/s (peak %.1f/s over 5s; %s); ungated %d in %s = %.1f/s (peak %.1f/s over 5s)",
			g.placements, g.span.Round(time.Second), g.perSec, g.peak, pins, u.placements, u.span.Round(time.Second), u.perSec, u.peak),
		fmt.Sprintf("CHURN scheduler: CPU %s (user+sys) during the gated run, peak RSS (VmHWM) %.1f MiB; %d warnings, %d 'pinned group has no allocation' lines",
			c.cpu.Round(10*time.Millisecond), float64(c.hwm)/1024, c.warnLines, c.noAllocLines),
		"CHURN scheduler's warnings: " + topCounts(c.warnings, 5),
		"CHURN the first of the 3 most frequent: " + firstOfTop(c.warnings, c.warnFirst, 3),
		fmt.Sprintf("CHURN records at end: %s, %s after the last job finished", c.recordsAtEnd, c.recordsIn.Round(time.Second)),
		fmt.Sprintf("CHURN Nomad's eval broker, most at once (sampled every 30s): gated run %d ready, %d pending, %d blocked (%d escaped); Nomad alone %d ready, %d pending, %d blocked",
			c.gated.broker.ready, c.gated.broker.pending, c.gated.broker.blocked, c.gated.broker.escaped, c.ungated.broker.ready, c.ungated.broker.pending, c.ungated.broker.blocked),
		fmt.Sprintf("CHURN watch: gated %d allocation events, %d full lists; ungated %d events, %d lists", c.gated.events, c.gated.lists, c.ungated.events, c.ungated.lists),
	}
	c.e.t.Log("\n" + strings.Join(lines, "\n"))
}

func schedPinsDelta(c *churn) string {
	if c.pins1 < 0 || c.gated.pins0 < 0 {
		return "pins unknown"
	}
	return fmt.Sprintf("%.0f pins", c.pins1-c.gated.pins0)
}

// firstFailure is the first failed allocation of a run and why it failed.
func (c *churn) firstFailure(r *churnRun) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failedAllocs) == 0 {
		return "none"
	}
	return r.failedAllocs[0]
}

// firstOfTop is the first line (first) of each of the n most frequent
// keys of m, one per line.
func firstOfTop(m map[string]int, first map[string]string, n int) string {
	var out []string
	for _, k := range topKeys(m, n) {
		out = append(out, "\n  "+first[k])
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "")
}

// topKeys is the n most frequent keys of m, most frequent first (ties by
// key).
func topKeys(m map[string]int, n int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	return keys[:min(n, len(keys))]
}

// topCounts is the n most frequent keys with their counts.
func topCounts(m map[string]int, n int) string {
	var out []string
	for _, k := range topKeys(m, n) {
		out = append(out, fmt.Sprintf("%dx %q", m[k], k))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}
