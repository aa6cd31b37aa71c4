package interposer

import (
	"fmt"
	"math"
	"strconv"
	"sync"
)

// The rows of `make gpu-check` that a GPU-virtualisation benchmark reports
// (issue 29): memory-limit accuracy, compute-limit accuracy, a noisy
// neighbour's cost, graph capture under a cap, and the library's overhead
// per launch and per allocation. Over the fake driver the compute rows run
// on the simulated clock, so that what they find is the library's doing,
// not the host's speed; the overheads are wall-clock figures, reported on
// both drivers and never checked ("measured").

// gpuCheckRows is the table's length, gpuCheckMeasured its reported rows.
const (
	gpuCheckRows     = 23
	gpuCheckMeasured = 6
)

// kernels is the compute rows' kernel, from calib.
type kernels struct {
	n     string // its iterations (the fake's: its µs)
	alone uint64 // its GPU time alone, ns
}

// share is a "spin" line's GPU share in percent: its kernels' work (each
// alone ns) over its window.
func (k kernels) share(line []string) float64 {
	if len(line) < 4 || num(line[3]) == 0 {
		return 0
	}
	return 100 * float64(num(line[2])*k.alone) / float64(num(line[3]))
}

// rate is a "spin" or "replay" line's throughput: per second.
func rate(line []string) float64 {
	if len(line) < 4 || num(line[3]) == 0 {
		return 0
	}
	return float64(num(line[2])) * 1e9 / float64(num(line[3]))
}

// memoryAccuracy: for caps of 1/8, 1/4 and 1/2 of the GPU's memory (of
// 16 GiB on a larger GPU: caps of at most 8 GiB), the bytes a task really
// gets (allocations of 64 MiB, then halved at each refusal down to 1 MiB)
// against its cap; held within [cap - 64 MiB, cap].
func (g *gpuChecker) memoryAccuracy(total uint64) ([]checkRow, error) {
	base := min(total, 16<<30)
	var rows []checkRow
	for _, f := range []uint64{8, 4, 2} {
		capB := base / f / checkMiB * checkMiB
		l, err := g.fields(fmt.Sprintf("memory_bytes=%d\n", capB), "fill:64:1")
		if err != nil {
			return rows, err
		}
		got := num(l[0][2])
		rows = append(rows, checkRow{
			name:   fmt.Sprintf("memory cap %d MiB (%.1f%% of the GPU): got/cap", capB/checkMiB, 100*float64(capB)/float64(total)),
			want:   fmt.Sprintf("%d..%d MiB, then 2", (capB-64*checkMiB)/checkMiB, capB/checkMiB),
			got:    fmt.Sprintf("%d MiB = %.2f%%, then %s", got/checkMiB, 100*float64(got)/float64(capB), l[0][1]),
			held:   got <= capB && got+64*checkMiB >= capB && l[0][1] == "2",
			metric: fmt.Sprintf("mem-got-of-cap-1/%d-%%", f), value: 100 * float64(got) / float64(capB),
		})
	}
	return rows, nil
}

// computeAccuracy: one process alone under caps of 10, 25, 50 and 90%,
// kernels back to back for 3 s: its share of the GPU, within 5 points.
func (g *gpuChecker) computeAccuracy(k kernels) ([]checkRow, error) {
	var rows []checkRow
	for _, pct := range []int{10, 25, 50, 90} {
		l, err := g.fieldsOn(g.clock(1)(0), fmt.Sprintf("compute_pct=%d\n", pct), "spin:"+k.n+":3000")
		if err != nil {
			return rows, err
		}
		p := k.share(l[0])
		rows = append(rows, checkRow{name: fmt.Sprintf("compute cap %d%% alone", pct), want: fmt.Sprintf("%d (within 5 points)", pct),
			got: fmt.Sprintf("%.1f", p), held: l[0][1] == "0" && math.Abs(p-float64(pct)) <= 5, metric: fmt.Sprintf("share-cap-%d-%%", pct), value: p})
	}
	return rows, nil
}

// pair runs two programs at once on clock (started together), each in
// its reservation directory, with env added to both environments.
func (g *gpuChecker) pair(clock func(parties, party int) []string, dirs [2]string, args [2][]string, env ...string) ([2][][]string, error) {
	var out [2][][]string
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.cmdIn(clock(2, i), dirs[i], args[i]...)
			c.Env = append(c.Env, env...)
			out[i], errs[i] = g.output(c, args[i])
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		return out, fmt.Errorf("side by side: %v; %v", errs[0], errs[1])
	}
	return out, nil
}

// noisyNeighbours: a task's throughput alone, then beside a greedy
// neighbour (kernels back to back), measured over the same window (4 s
// after 1 s; 5 s after 3 s with TGS, whose loop takes time to settle):
//   - a task capped at 25% beside one capped at 75%: two normal tasks
//     whose caps fill the GPU, in turns on their GPU's rotation;
//   - a production task (class=production, not capped) busy 25% of the
//     time (each kernel followed by three times its length of host time)
//     beside an opportunistic one, sharing a TGS channel: the neighbour
//     gets what production leaves idle, paced by the TGS loop.
//
// Held: the task keeps 95% of its throughput alone (a cost of at most 5%).
func (g *gpuChecker) noisyNeighbours(k kernels) ([]checkRow, error) {
	var rows []checkRow
	spin := []string{"spin:" + k.n + ":5000:1000"}
	task, hog := reservation(g.t, "compute_pct=25\ntimeslice_id=251\n"), reservation(g.t, "compute_pct=75\ntimeslice_id=252\n")
	sliceFile(g.t, task, hog) // as the plugin links it: the two take turns
	clock := g.clockOn()      // the task runs alone, then its neighbour comes
	alone, err := g.output(g.cmdIn(clock(1, 0), task, spin...), spin)
	if err != nil {
		return rows, err
	}
	both, err := g.pair(clock, [2]string{task, hog}, [2][]string{spin, spin})
	if err != nil {
		return rows, err
	}
	pa, pw, pn := k.share(alone[0]), k.share(both[0][0]), k.share(both[1][0])
	kept := 0.0
	if pa > 0 {
		kept = 100 * pw / pa
	}
	rows = append(rows, checkRow{name: "noisy neighbour: 25% cap beside a 75% cap", want: "cost <= 5% of its throughput alone",
		got: fmt.Sprintf("%.1f%% alone, %.1f%% beside one at %.1f%%: cost %.1f%%", pa, pw, pn, cost(kept)), held: kept >= 95,
		metric: "neighbour-cost-25-75-%", value: 100 - kept})

	prod := reservation(g.t, "compute_pct=100\nclass=production\n")
	opp := reservation(g.t, "compute_pct=100\nclass=opportunistic\n")
	channel(g.t, prod, opp)
	work := []string{fmt.Sprintf("spin:%s:8000:3000:%d", k.n, 3*k.alone/1000)}
	greedy := []string{"spin:" + k.n + ":8000:3000"}
	clock = g.clockOn()
	alone, err = g.output(g.cmdIn(clock(1, 0), prod, work...), work)
	if err != nil {
		return rows, err
	}
	both, err = g.pair(clock, [2]string{prod, opp}, [2][]string{work, greedy})
	if err != nil {
		return rows, err
	}
	ra, rw := rate(alone[0]), rate(both[0][0])
	kept = 0
	if ra > 0 {
		kept = 100 * rw / ra
	}
	rows = append(rows, checkRow{name: "noisy neighbour: production beside opportunistic", want: "cost <= 5% of its throughput alone",
		got: fmt.Sprintf("busy %.1f%% alone; beside one at %.1f%%: cost %.1f%%", k.share(alone[0]), k.share(both[1][0]), cost(kept)), held: kept >= 95,
		metric: "neighbour-cost-tgs-%", value: 100 - kept})
	return rows, nil
}

// cost is 100 - kept, to a tenth (never "-0.0").
func cost(kept float64) float64 { return math.Round((100-kept)*10)/10 + 0 }

// graphUnderACap: a graph of 4 kernels captured on a stream in global
// mode, instantiated, then replayed back to back (cuGraphLaunch) for 3 s,
// without the library and under a 25% cap: the capture succeeds under the
// cap, and the replays' throughput under it is 25% of theirs without
// (within 5 points).
func (g *gpuChecker) graphUnderACap(k kernels) ([]checkRow, error) {
	args := []string{"capture:" + k.n + ":4", "replay:3000:500"}
	var got [2][][]string
	for i, limits := range []string{"", "compute_pct=25\n"} {
		l, err := g.fieldsOn(g.clock(1)(0), limits, args...)
		if err != nil {
			return nil, err
		}
		if len(l) < 2 || len(l[0]) < 2 || len(l[1]) < 4 {
			return nil, fmt.Errorf("graph: %v", l)
		}
		got[i] = l
	}
	alone, capped := got[0], got[1]
	share := 0.0
	if r := rate(alone[1]); r > 0 {
		share = 100 * rate(capped[1]) / r
	}
	ok := alone[0][1] == "0" && capped[0][1] == "0" && alone[1][1] == "0" && capped[1][1] == "0"
	return []checkRow{
		{name: "graph capture (global mode) under a 25% cap", want: "0 (captured and instantiated)",
			got: fmt.Sprintf("%s (without the library: %s)", capped[0][1], alone[0][1]), held: capped[0][1] == "0" && alone[0][1] == "0"},
		{name: "graph replays under a 25% cap", want: "25 (within 5 points) of uncapped",
			got:  fmt.Sprintf("%.1f (%.1f replays/s of 4 kernels uncapped, %.1f%% busy)", share, rate(alone[1]), k.share([]string{"", "", strconv.FormatUint(4*num(alone[1][2]), 10), alone[1][3]})),
			held: ok && math.Abs(share-25) <= 5, metric: "share-graph-cap-25-%", value: share},
	}, nil
}

// overheads: ns per cuLaunchKernel (the shortest kernel, 100000 launches)
// without the library, under it at compute_pct=100 (the hook passes the
// launch through) and paced (compute_pct=90, a cap such kernels never
// reach: the pacer's whole path, never a wait); ns per cuMemAlloc_v2 (1 MiB)
// and cuMemFree_v2 pair without the library and under a memory cap. The
// host's time: reported, never checked.
func (g *gpuChecker) overheads(kernels) ([]checkRow, error) {
	var rows []checkRow
	var base float64
	for _, c := range []struct{ name, limits, cmd, metric string }{
		{"launch, no library: ns per launch", "", "launchbench:100000", "ns/launch-no-library"},
		{"launch, library at 100%: ns per launch", "compute_pct=100\n", "launchbench:100000", "ns/launch-hook"},
		{"launch, library paced (90%): ns per launch", "compute_pct=90\n", "launchbench:100000", "ns/launch-paced"},
		{"alloc+free 1 MiB, no library: ns per pair", "", "allocbench:10000", "ns/alloc-free-no-library"},
		{"alloc+free 1 MiB, library: ns per pair", fmt.Sprintf("memory_bytes=%d\n", 1<<30), "allocbench:10000", "ns/alloc-free-library"},
	} {
		l, err := g.fields(c.limits, c.cmd)
		if err != nil {
			return rows, err
		}
		ns, _ := strconv.ParseFloat(l[0][2], 64)
		got := fmt.Sprintf("%.0f ns", ns)
		if c.limits == "" {
			base = ns
		} else {
			got += fmt.Sprintf(" (%+.0f)", ns-base)
		}
		if l[0][1] != "0" {
			got += ", rc " + l[0][1]
		}
		rows = append(rows, checkRow{name: c.name, want: "reported", got: got, measured: true, metric: c.metric, value: ns})
	}
	return rows, nil
}
