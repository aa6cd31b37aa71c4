package placement

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// arriveUntil replays shuffled openb requests on a fresh cluster of G2-like
// nodes until the GPU demand that arrived reaches the given fraction of
// capacity (as in the FGD paper's method; pods never depart), and returns
// the fraction of GPU capacity allocated.
func arriveUntil(t testing.TB, name string, nodes int, demand float64, seed uint64) float64 {
	reqs := openbRequests(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	s := NewSnapshot()
	for i := range nodes {
		n, err := NodeFromSpec(NodeSpec{ID: fmt.Sprintf("n%04d", i), CPU: 96000, MemoryMiB: 393216, GPUs: 8, Model: "G2"})
		must.NoError(t, err)
		must.NoError(t, s.AddNode(n))
	}
	p := policy(t, name, Options{Seed: seed, Mix: MixFromRequests(reqs, 0.95)})
	capacity := float64(nodes * 8 * 100)
	arrived, placed := 0.0, 0.0
	for i := 0; arrived < demand*capacity; i++ {
		r := reqs[i%len(reqs)]
		r.ID = "p" + strconv.Itoa(i)
		arrived += float64(r.Shares)
		if d := p.Decide(s, r); d.Placed() {
			must.NoError(t, s.Apply(d))
			placed += float64(r.Shares)
		}
	}
	// Requested shares placed: a policy that hands out a whole GPU for a
	// fraction gets credit only for the fraction.
	return placed / capacity
}

// TestOpenbAllocationRatio compares policies the way the FGD paper does, on
// a 100-node slice of G2 nodes at 100% arrived demand: the fragmentation-
// aware policies must allocate more than random placement.
func TestOpenbAllocationRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a trace")
	}
	ratio := map[string]float64{}
	for _, name := range []string{PolicyRandom, PolicyBestFit, PolicyGPUPacking, PolicyFGD, PolicyGpushare, PolicyHived, PolicyNomadNative, PolicyFirstFit} {
		sum := 0.0
		for seed := range uint64(3) {
			sum += arriveUntil(t, name, 100, 1.0, seed)
		}
		ratio[name] = sum / 3
		t.Logf("%-12s allocated %.2f%% of GPU capacity at 100%% arrived demand", name, 100*ratio[name])
	}
	must.Greater(t, ratio[PolicyRandom], ratio[PolicyFGD])
	must.Greater(t, ratio[PolicyRandom], ratio[PolicyGpushare])
	must.Greater(t, ratio[PolicyHived], ratio[PolicyGpushare])
	must.Greater(t, ratio[PolicyNomadNative], ratio[PolicyGpushare])
}

// openbNodes reads the openb GPU node list (1,213 nodes, 6,212 GPUs).
func openbNodes(t testing.TB) []NodeSpec {
	f, err := os.Open("testdata/openb_gpu_nodes.csv")
	must.NoError(t, err)
	defer f.Close()
	var out []NodeSpec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		c := strings.Split(sc.Text(), ",")
		if strings.HasPrefix(c[0], "#") || c[0] == "sn" {
			continue
		}
		cpu, _ := strconv.ParseInt(c[1], 10, 64)
		mem, _ := strconv.ParseInt(c[2], 10, 64)
		gpus, _ := strconv.Atoi(c[3])
		out = append(out, NodeSpec{ID: c[0], CPU: cpu, MemoryMiB: mem, GPUs: gpus, Model: c[4]})
	}
	must.NoError(t, sc.Err())
	return out
}

// TestOpenbFullCluster replays the default openb trace on the whole openb
// GPU cluster in the manner of the FGD paper (shuffled pods, then draws with
// replacement until the arrived GPU demand is 130% of capacity; pods never
// leave; ties go to a random node order) and logs the allocation ratio at
// 100% and 130% arrived demand next to the FGD authors' published means.
func TestOpenbFullCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the full trace")
	}
	published := map[string][2]float64{PolicyRandom: {86.30, 87.47}, PolicyBestFit: {92.86, 93.08}, PolicyGPUPacking: {91.78, 92.00}, PolicyFGD: {95.23, 95.39}}
	reqs := openbRequests(t)
	specs := openbNodes(t)
	capacity := 0.0
	for _, sp := range specs {
		capacity += float64(sp.GPUs * 100)
	}
	must.Eq(t, 621200.0, capacity)
	got := map[string][2]float64{}
	for _, name := range []string{PolicyRandom, PolicyBestFit, PolicyGPUPacking, PolicyFGD, PolicyGpushare} {
		var sum [2]float64
		const seeds = 1
		for seed := range uint64(seeds) {
			rng := rand.New(rand.NewPCG(seed, 42))
			order := rng.Perm(len(specs))
			s := NewSnapshot()
			for _, i := range order {
				n, err := NodeFromSpec(specs[i])
				must.NoError(t, err)
				must.NoError(t, s.AddNode(n))
			}
			stream := append([]Request(nil), reqs...)
			rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
			p := policy(t, name, Options{Seed: seed, Mix: MixFromRequests(reqs, 0.95)})
			arrived, placed := 0.0, 0.0
			at100 := -1.0
			for i := 0; arrived < 1.3*capacity; i++ {
				var r Request
				if i < len(stream) {
					r = stream[i]
				} else {
					r = reqs[rng.IntN(len(reqs))]
				}
				r.ID = "p" + strconv.Itoa(i)
				arrived += float64(r.Shares)
				if d := p.Decide(s, r); d.Placed() {
					must.NoError(t, s.Apply(d))
					placed += float64(r.Shares)
				}
				if at100 < 0 && arrived >= capacity {
					at100 = placed
				}
			}
			sum[0] += 100 * at100 / capacity
			sum[1] += 100 * placed / capacity
		}
		got[name] = [2]float64{sum[0] / seeds, sum[1] / seeds}
		note := "not in the FGD paper"
		if pub, ok := published[name]; ok {
			note = fmt.Sprintf("FGD paper: %.2f, %.2f", pub[0], pub[1])
		}
		t.Logf("%-12s allocation ratio %.2f%% at 100%%, %.2f%% at 130%% arrived (%s)", name, got[name][0], got[name][1], note)
	}
	must.Greater(t, got[PolicyRandom][1], got[PolicyFGD][1])
	must.Greater(t, got[PolicyBestFit][1], got[PolicyFGD][1])
	must.Greater(t, got[PolicyBestFit][1], got[PolicyGpushare][1])
	// The baselines reproduce the published means within a point.
	for name, pub := range published {
		must.Between(t, pub[1]-1, got[name][1], pub[1]+1, must.Sprint(name))
	}
}
