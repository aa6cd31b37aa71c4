package interposer

import (
	"fmt"
	"path/filepath"
	"testing"
)

// The compute tests' scenarios on the host's clock (wallGPU): the figures a
// real GPU's time-slicing would see on this machine, host wake-up latency
// and load included. Reported with b.ReportMetric on every run (make bench;
// make test runs each once), never asserted: on a loaded machine they move
// by more than the effects the tests check on the simulated clock.

// BenchmarkComputeShares: each process's share of the GPU, in percent.
func BenchmarkComputeShares(b *testing.B) {
	bin := build(b)
	b.Run("caps-30-70", func(b *testing.B) {
		for range b.N {
			ws := capsPair(b, bin, wallGPU(b), true)
			b.ReportMetric(ws[0].share(), "share-30%")
			b.ReportMetric(ws[1].share(), "share-70%")
		}
	})
	b.Run("caps-30-70-no-library", func(b *testing.B) {
		for range b.N {
			ws := capsPair(b, bin, wallGPU(b), false)
			b.ReportMetric(ws[0].share(), "share-4ms%")
			b.ReportMetric(ws[1].share(), "share-2ms%")
		}
	})
	for _, c := range []struct {
		name    string
		lib     bool
		threads int
	}{{"alone-30", true, 1}, {"alone-no-library", false, 1}, {"threads-4-at-30", true, 4}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(capAlone(b, bin, wallGPU(b), c.lib, c.threads).share(), "share%")
			}
		})
	}
	b.Run("per-task-2x-at-30", func(b *testing.B) {
		for range b.N {
			ws := perTask(b, bin, wallGPU(b))
			b.ReportMetric(ws[0].share()+ws[1].share(), "share%")
		}
	})
	for _, lib := range []bool{true, false} {
		b.Run(fmt.Sprintf("queued-300x1ms-library-%v", lib), func(b *testing.B) {
			for range b.N {
				b.ReportMetric(queued(b, bin, wallGPU(b), lib), "ms")
			}
		})
	}
}

// BenchmarkTGS: production's throughput kept (percent of alone) and the
// opportunistic task's part of production's idle time (percent), as
// TestTGSOnRealProcesses and TestTGSProtectsProductionOnRealProcesses, and
// the opportunistic task alone with and without the library.
func BenchmarkTGS(b *testing.B) {
	bin := build(b)
	for _, c := range []struct {
		name    string
		oppKern int
		control bool
	}{{"opp-1ms", 1000, true}, {"opp-3ms", 3000, true}, {"opp-3ms-unchecked", 3000, false}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				kept, ofIdle := tgsFigures(b, bin, wallGPU(b), 8000, 2000, c.oppKern, c.control)
				b.ReportMetric(kept, "kept%")
				b.ReportMetric(ofIdle, "of-idle%")
			}
		})
	}
	b.Run("no-production", func(b *testing.B) {
		for range b.N {
			shares := noProduction(b, bin, wallGPU(b))
			b.ReportMetric(shares[0], "share%")
			b.ReportMetric(shares[1], "share-no-library%")
		}
	})
}

// benchLaunch runs n launches of a 0 us kernel in one process and returns
// the program's own figure: ns per cuLaunchKernel call (linked symbol).
func benchLaunch(b *testing.B, bin *binaries, r run, n int) float64 {
	b.Helper()
	r.program, r.mode = bin.kdirect, "direct"
	r.env = append(r.env, "FAKECUDA_GPU="+filepath.Join(b.TempDir(), "gpu"))
	lines := r.output(b, bin, "kern:0", fmt.Sprintf("bench:%d", n))
	return nsFigure(b, lines[len(lines)-1], "bench")
}

// nsFigure reads a timing line of the test programs, "<word> <rc> <ns>",
// failing the benchmark on anything else or a non-zero rc.
func nsFigure(b *testing.B, line, word string) float64 {
	b.Helper()
	var rc int
	var ns float64
	if _, err := fmt.Sscanf(line, word+" %d %f", &rc, &ns); err != nil || rc != 0 {
		b.Fatalf("%q %v", line, err)
	}
	return ns
}

// BenchmarkLaunch: what the library adds to a cuLaunchKernel call over the
// fake driver ("ns-added/launch", against the same launches without the
// library, measured at the start of the same run): not under gpushare; a
// reservation without a compute limit; production counting into a TGS
// channel; a compute limit that does not bind (kernels of 0 us: the whole
// paced path, events and mutex included, never a wait). ns/op is the
// program's ns per launch.
func BenchmarkLaunch(b *testing.B) {
	bin := build(b)
	const baseN = 2000000
	base := benchLaunch(b, bin, run{noLib: true}, baseN)
	prodDir := reservation(b, "compute_pct=100\nclass=production\n")
	channel(b, prodDir)
	cases := []struct {
		name string
		r    run
	}{
		{"no-library", run{noLib: true}},
		{"not-under-gpushare", run{}},
		{"no-compute-limit", run{limits: reservation(b, "compute_pct=100\n")}},
		{"production-channel", run{limits: prodDir}},
		{"limit-not-binding", run{limits: reservation(b, "compute_pct=90\n")}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ns := benchLaunch(b, bin, c.r, max(b.N, 100000))
			b.ReportMetric(ns, "ns/op")
			b.ReportMetric(ns-base, "ns-added/launch")
		})
	}
	// the fake driver's event calls, which the paced path's figure includes
	b.Run("fake-events-per-paced-launch", func(b *testing.B) {
		r := run{noLib: true, program: bin.kdirect, mode: "direct"}
		line := r.output(b, bin, fmt.Sprintf("evbench:%d", max(b.N, 100000)))[0]
		b.ReportMetric(nsFigure(b, line, "evbench"), "ns/op")
	})
}
