package placement

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/shoenig/test/must"
)

// TestPairingByMeasuredThroughput pairs Gavel jobs with the jobs already
// running alone on half of each GPU and scores the pairings each policy made by the throughput Gavel measured for them
// (norm_a + norm_b; 0 for pairs that could not share). The model is fitted
// on the training split only.
func TestPairingByMeasuredThroughput(t *testing.T) {
	f, err := os.Open("../interference/testdata/gavel_v100_pairs.csv")
	must.NoError(t, err)
	pairs, err := interference.ReadGavelPairs(f)
	f.Close()
	must.NoError(t, err)
	train, _ := interference.Split(pairs, 5)
	model := interference.Fit(train)
	measured := map[[2]string]float64{}
	for _, p := range pairs {
		measured[[2]string{p.A, p.B}] = min(p.NormA, 1) + min(p.NormB, 1)
	}
	names := model.Names()

	score := map[string]float64{}
	for _, name := range []string{PolicyGpushare, PolicyFGD, PolicyFirstFit, PolicyRandom} {
		total, jobs := 0.0, 0
		for seed := range uint64(40) {
			rng := rand.New(rand.NewPCG(seed, 3))
			s := cluster(t, NodeSpec{ID: "a", GPUs: 4}, NodeSpec{ID: "b", GPUs: 4})
			p := policy(t, name, Options{Model: model, Seed: seed})
			// One resident per GPU, then eight newcomers choose partners.
			for i, n := range s.Nodes() {
				for g := range n.GPUs {
					prof, _ := model.Lookup(names[rng.IntN(len(names))])
					must.NoError(t, s.AddAlloc(Alloc{ID: fmt.Sprintf("res-%d-%d", i, g), Node: n.ID, Shares: shareRange(n.GPUs[g].UUID, 0, 50), Profile: prof}))
				}
			}
			for i := range 8 {
				prof, _ := model.Lookup(names[rng.IntN(len(names))])
				d := p.Decide(s, Request{ID: fmt.Sprintf("j%02d", i), Count: 1, Shares: 50, Profile: prof})
				if d.Placed() {
					must.NoError(t, s.Apply(d))
				}
			}
			for _, n := range s.Nodes() {
				for i := range n.GPUs {
					g := &n.GPUs[i]
					switch len(g.allocs) {
					case 1:
						total++
						jobs++
					case 2:
						total += measured[[2]string{g.allocs[0].Profile.Name, g.allocs[1].Profile.Name}]
						jobs += 2
					}
				}
			}
		}
		score[name] = total / float64(jobs)
		t.Logf("%-10s measured normalised throughput per job: %.3f", name, score[name])
	}
	must.Greater(t, score[PolicyFGD], score[PolicyGpushare])
	must.Greater(t, score[PolicyRandom], score[PolicyGpushare])
}
