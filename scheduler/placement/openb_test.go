package placement

import (
	"fmt"
	"math/rand/v2"
	"strconv"
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
	must.Greater(t, ratio[PolicyBestFit], ratio[PolicyGpushare])
	must.Greater(t, ratio[PolicyHived], ratio[PolicyGpushare])
	must.Greater(t, ratio[PolicyNomadNative], ratio[PolicyGpushare])
}
