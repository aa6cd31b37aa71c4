package placement

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// openbRequests reads the openb pod trace as requests with 100 shares per
// GPU (gpu_milli 460 is 46 shares; num_gpu 2 is 200 shares).
func openbRequests(t testing.TB) []Request {
	t.Helper()
	f, err := os.Open("testdata/openb_pods_default.csv")
	must.NoError(t, err)
	defer f.Close()
	var out []Request
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "cpu_milli") {
			continue
		}
		c := strings.Split(line, ",")
		cpu, _ := strconv.ParseInt(c[0], 10, 64)
		mem, _ := strconv.ParseInt(c[1], 10, 64)
		ngpu, _ := strconv.Atoi(c[2])
		milli, _ := strconv.Atoi(c[3])
		shares := 0
		switch {
		case ngpu == 1 && milli < 1000:
			shares = milli / 10
		case ngpu >= 1:
			shares = ngpu * 100
		}
		out = append(out, Request{ID: fmt.Sprintf("pod-%d", len(out)), Count: 1, Shares: shares, Res: Resources{CPU: cpu, MemoryMiB: mem}})
	}
	must.NoError(t, sc.Err())
	must.Greater(t, 8000, len(out))
	return out
}

// benchCluster builds n nodes shaped like openb's G2 nodes (8 GPUs, 96
// cores, 384 GiB) with the HGX H100 link matrix, racks of 32 nodes.
func benchCluster(t testing.TB, n int) *Snapshot {
	s := NewSnapshot()
	for i := range n {
		nd, err := NodeFromSpec(NodeSpec{ID: fmt.Sprintf("node-%05d", i), Rack: fmt.Sprintf("rack-%03d", i/32),
			CPU: 96000, MemoryMiB: 393216, GPUs: 8, Model: "G2", Links: links(topologies.HGXH100), NUMA: numa(topologies.HGXH100)})
		must.NoError(t, err)
		must.NoError(t, s.AddNode(nd))
	}
	return s
}

// BenchmarkDecide measures decisions per second on a warm cluster: nodes
// are filled to about 60% of their GPU shares with openb requests, one pass
// over the trace warms the policy's indices (the first request of a kind
// scores every node once), then every iteration removes the oldest
// allocation and places the next request. best-fit, the cheapest policy
// that scores every node, runs first as the baseline; gpushare also reports
// its speed as a ratio to best-fit's in the same process ("x-best-fit").
func BenchmarkDecide(b *testing.B) {
	reqs := openbRequests(b)
	for _, nodes := range []int{1000, 4000, 16000} {
		baseline := 0.0
		for _, name := range []string{PolicyBestFit, PolicyGpushare} {
			b.Run(fmt.Sprintf("%s/nodes=%d", name, nodes), func(b *testing.B) {
				s := benchCluster(b, nodes)
				mix := MixFromRequests(reqs, 0.95)
				fill := policy(b, PolicyFirstFit, Options{})
				p := policy(b, name, Options{Mix: mix})
				var fifo []string
				next := 0
				step := func(pol Policy) {
					r := reqs[next%len(reqs)]
					r.ID = "r" + strconv.Itoa(next)
					next++
					d := pol.Decide(s, r)
					if d.Placed() {
						if err := s.Apply(d); err != nil {
							b.Fatal(err)
						}
						fifo = append(fifo, d.Placements[0].AllocID)
					}
				}
				target := nodes * 8 * 100 * 6 / 10
				used := func() int { return nodes*8*100 - totalFree(s) }
				for used() < target {
					for range 1000 {
						step(fill)
					}
				}
				for range len(reqs) { // warm: every kind of request once
					_, _ = s.Remove(fifo[0])
					fifo = fifo[1:]
					step(p)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					_, _ = s.Remove(fifo[0])
					fifo = fifo[1:]
					step(p)
				}
				rate := float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rate, "decisions/s")
				switch {
				case name == PolicyBestFit:
					baseline = rate
				case baseline > 0:
					b.ReportMetric(rate/baseline, "x-best-fit")
				}
			})
		}
	}
}

func totalFree(s *Snapshot) int {
	f := 0
	for _, n := range s.nodes {
		f += n.FreeShares()
	}
	return f
}
