package placement

import (
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// TestNomadPicksTheGPUOnThePinnedNode: with one device group per GPU and a
// pin naming only the node, Nomad, not the scheduler, chooses the GPU.
// Uniformly among those with room (map order), or, when every request
// carries the same fixed affinity on the GPU's index, the lowest-indexed
// GPU with room, always; never a GPU without room, never another node,
// and always the lowest free shares of the GPU it takes. A decision of
// several GPUs is left as decided.
func TestNomadPicksTheGPUOnThePinnedNode(t *testing.T) {
	s := cluster(t, NodeSpec{ID: "a", GPUs: 4})
	ff := policy(t, PolicyFirstFit, Options{})
	place(t, s, ff, Request{ID: "full", Shares: 100}) // GPU 0 full
	place(t, s, ff, Request{ID: "most", Shares: 90})  // GPU 1: 10 free
	decide := func() *Decision {                      // the scheduler's own choice of GPU, whichever it is
		d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "q", Count: 1, Shares: 25})
		must.True(t, d.Placed())
		return d
	}
	t.Run("first", func(t *testing.T) {
		for range 3 {
			d := decide()
			s.NomadPicksFirstGPU(d)
			must.Eq(t, []int{2}, gpuIdx(d.Placements[0]), must.Sprint("GPU 0 is full and GPU 1 has 10 shares: the lowest with room for 25 is GPU 2"))
			must.Len(t, 25, d.Placements[0].Shares)
			must.Eq(t, d.Placements[0].GPUs[0]+":0", d.Placements[0].Shares[0])
			must.Eq(t, "a", d.Placements[0].Node)
		}
	})
	t.Run("map order", func(t *testing.T) {
		seen := map[int]int{}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 200 {
			d := decide()
			s.NomadPicksGPU(d, rng)
			seen[gpuIdx(d.Placements[0])[0]]++
		}
		must.MapLen(t, 2, seen, must.Sprintf("GPUs 2 and 3 only, both taken: %v", seen))
		must.Positive(t, seen[2])
		must.Positive(t, seen[3])
	})
	t.Run("several GPUs are left as decided", func(t *testing.T) {
		d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "w", Count: 1, Shares: 200})
		must.True(t, d.Placed())
		want := append([]string(nil), d.Placements[0].GPUs...)
		s.NomadPicksFirstGPU(d)
		must.Eq(t, want, d.Placements[0].GPUs)
	})
}
