package openb

import (
	"math"
	"math/rand"
	"strconv"
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim/report"
	"github.com/shoenig/test/must"
)

func gpuPod(name string, cpu int64, num, milli int) Pod {
	return Pod{Name: name, CPU: cpu, MemoryMiB: 1024, NumGPU: num, GPUMilli: milli}
}

// TestPrefix: the pods the replay had seen when it left a bin, binned as
// Replay bins them (round half to even of arrived / 1% of capacity).
func TestPrefix(t *testing.T) {
	pods := []Pod{gpuPod("a", 1, 1, 500), gpuPod("b", 1, 1, 500), {Name: "cpu", CPU: 1}, gpuPod("c", 1, 1, 1000), gpuPod("d", 1, 1, 300)}
	w := Workload{Pods: pods, CapacityMilli: 2000} // arrived: 25%, 50%, 50%, 100%, 115%
	must.EqOp(t, 0, Prefix(w, 10))
	must.EqOp(t, 1, Prefix(w, 25))
	must.EqOp(t, 3, Prefix(w, 50)) // the CPU-only pod arrives in bin 50 too
	must.EqOp(t, 4, Prefix(w, 100))
	must.EqOp(t, 5, Prefix(w, MaxDemand))
}

func TestLargestFirst(t *testing.T) {
	pods := []Pod{gpuPod("small", 1000, 1, 200), {Name: "cpu", CPU: 9000}, gpuPod("heavy", 8000, 1, 1000),
		gpuPod("lean", 2000, 1, 1000), gpuPod("two", 4000, 2, 1000)}
	names := func(ps []Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	must.Eq(t, []string{"two", "heavy", "lean", "small", "cpu"}, names(LargestFirst(pods, OrderHeavy)))
	must.Eq(t, []string{"two", "lean", "heavy", "small", "cpu"}, names(LargestFirst(pods, OrderLean)))
	must.Eq(t, "small", pods[0].Name) // the input is not reordered
}

// TestOfflineSeesAllPods: two 0.3-GPU pods arrive before a whole-GPU pod
// on one GPU. Online, every policy places the fractions and turns the
// whole pod away (60%); the offline packer places the whole pod first.
func TestOfflineSeesAllPods(t *testing.T) {
	nodes := []Node{{"a", 8000, 1 << 20, 1, "T4"}}
	pods := []Pod{gpuPod("p1", 1000, 1, 300), gpuPod("p2", 1000, 1, 300), gpuPod("p3", 1000, 1, 1000)}
	w := Workload{Pods: pods, NodeOrder: []int{0}, CapacityMilli: 1000}
	on, err := Replay("tiny", placement.PolicyGpushare, 42, nodes, w, Mix(pods, 1), nil)
	must.NoError(t, err)
	must.EqOp(t, 2, on.Placed)
	off, err := Offline(42, nodes, w, pods, Mix(pods, 1))
	must.NoError(t, err)
	must.EqOp(t, int64(1000), off.AllocMilli)
	must.EqOp(t, 1, off.Placed)
	// The refused fractions do not fit the full GPU: GPU shape, nothing free.
	must.Eq(t, Stranding{}, off.Stranded)
	ls, err := Limits("tiny", 42, nodes, w, Mix(pods, 1))
	must.NoError(t, err)
	must.SliceLen(t, 2, ls)
	must.Eq(t, 160.0, float64(ls[1].Arrived))
	must.Eq(t, 100.0, float64(ls[1].Offline))
	must.Eq(t, 100.0, float64(ls[1].Bound))
}

// TestUpperBoundByHand checks the bound's rules on instances small enough
// to solve by hand.
func TestUpperBoundByHand(t *testing.T) {
	t4 := func(name string, cpu int64, gpus int) Node { return Node{name, cpu, 1 << 20, gpus, "T4"} }
	cases := []struct {
		name  string
		nodes []Node
		pods  []Pod
		want  int64
	}{
		{"demand below capacity", []Node{t4("a", 8000, 2)}, []Pod{gpuPod("p", 1000, 1, 500)}, 500},
		{"capacity below demand", []Node{t4("a", 8000, 1)}, []Pod{gpuPod("p", 1000, 1, 1000), gpuPod("q", 1000, 1, 1000)}, 1000},
		// Two 0.7 GPU pods never share a GPU: the relaxation alone says 1000.
		{"shape", []Node{t4("a", 8000, 1)}, []Pod{gpuPod("p", 1000, 1, 700), gpuPod("q", 1000, 1, 700)}, 700},
		// 4 GPUs are free but a 4-GPU pod fits no 2-GPU node.
		{"GPUs per node", []Node{t4("a", 8000, 2), t4("b", 8000, 2)}, []Pod{gpuPod("p", 1000, 4, 1000)}, 0},
		// Only the V100 may serve p: its 1 GPU is the bound.
		{"model", []Node{t4("a", 8000, 2), {"v", 8000, 1 << 20, 1, "V100"}},
			[]Pod{{Name: "p", CPU: 1, NumGPU: 1, GPUMilli: 1000, Spec: []string{"V100"}}, {Name: "q", CPU: 1, NumGPU: 1, GPUMilli: 1000, Spec: []string{"V100"}}}, 1000},
		// Node a: 8 cores, 2 GPUs; node b: 16 cores, 4 GPUs. Four 1-GPU pods
		// of 8 cores and one half GPU of 1 core. The relaxation puts the half
		// and 7/8 of a big pod on a, two big pods on b: 500 + 875 + 2000.
		{"cpu", []Node{t4("a", 8000, 2), t4("b", 16000, 4)},
			[]Pod{gpuPod("p1", 8000, 1, 1000), gpuPod("p2", 8000, 1, 1000), gpuPod("p3", 8000, 1, 1000), gpuPod("p4", 8000, 1, 1000), gpuPod("h", 1000, 1, 500)}, 3375},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := UpperBound(c.nodes, c.pods)
			must.Between(t, c.want, got, c.want+1, must.Sprintf("bound %d, want %d", got, c.want))
		})
	}
}

// TestShapeBound: what fills the rest of a GPU holding a pod above half a
// GPU.
func TestShapeBound(t *testing.T) {
	cases := []struct {
		name     string
		capacity int64
		pods     []Pod
		want     int64
	}{
		// 0.3 cannot join 0.8: the best is 0.8 alone.
		{"nothing small enough", 1000, []Pod{gpuPod("big", 1, 1, 800), gpuPod("mid", 1, 1, 300)}, 800},
		// 0.2 fills 0.8's GPU exactly.
		{"filled", 1000, []Pod{gpuPod("big", 1, 1, 800), gpuPod("mid", 1, 1, 300), gpuPod("small", 1, 1, 200)}, 1000},
		// Three 0.81 on three GPUs leave 0.57, of which only 0.1 can be
		// filled (0.3 is too big for a 0.19 hole): 2.53 of the demand 2.83.
		{"holes", 3000, []Pod{gpuPod("a", 1, 1, 810), gpuPod("b", 1, 1, 810), gpuPod("c", 1, 1, 810), gpuPod("d", 1, 1, 100), gpuPod("e", 1, 1, 300)}, 2530},
		// With a whole-GPU pod it pays to leave one 0.81 out: 2 x 0.81 + 0.1
		// + 1.
		{"leave one out", 3000, []Pod{gpuPod("a", 1, 1, 810), gpuPod("b", 1, 1, 810), gpuPod("c", 1, 1, 810), gpuPod("d", 1, 1, 100), gpuPod("w", 1, 1, 1000)}, 2720},
		// Whole GPUs only: capacity and demand.
		{"whole", 2000, []Pod{gpuPod("a", 1, 2, 1000), gpuPod("b", 1, 1, 1000)}, 2000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.EqOp(t, c.want, ShapeBound(c.capacity, c.pods))
		})
	}
}

// TestBoundProperty: on random small clusters and pod lists, no online
// policy and not the offline packer allocates more than the bound, and the
// bound is at most the capacity and the demand.
func TestBoundProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	models := []string{"T4", "V100"}
	sizes := []int{1, 2, 4, 8}
	milli := []int{100, 190, 250, 300, 500, 600, 700, 810, 1000}
	iters := 60
	if testing.Short() {
		iters = 15
	}
	for it := range iters {
		var nodes []Node
		var capacity int64
		for i := range 1 + rng.Intn(4) {
			g := sizes[rng.Intn(len(sizes))]
			nodes = append(nodes, Node{"n" + strconv.Itoa(i), int64(4000 + 4000*rng.Intn(8)), int64(8192 * (1 + rng.Intn(8))), g, models[rng.Intn(2)]})
			capacity += int64(g) * 1000
		}
		var pods []Pod
		var demand int64
		for i := range 3 + rng.Intn(25) {
			p := Pod{Name: "p" + strconv.Itoa(i), CPU: int64(1000 * (1 + rng.Intn(12))), MemoryMiB: int64(1024 * (1 + rng.Intn(24))), NumGPU: 1, GPUMilli: milli[rng.Intn(len(milli))]}
			switch rng.Intn(6) {
			case 0:
				p.NumGPU, p.GPUMilli = sizes[rng.Intn(len(sizes))], 1000
			case 1:
				p.NumGPU, p.GPUMilli = 0, 0
			case 2:
				p.Spec = []string{models[rng.Intn(2)]}
			}
			pods = append(pods, p)
			demand += p.TotalMilli()
		}
		order := rng.Perm(len(nodes))
		w := Workload{Pods: pods, NodeOrder: order, CapacityMilli: capacity}
		mix := Mix(pods, 1)
		bound := UpperBound(nodes, pods)
		must.LessEq(t, min(capacity, demand), bound, must.Sprintf("instance %d", it))
		off, err := Offline(int64(it), nodes, w, pods, mix)
		must.NoError(t, err)
		must.LessEq(t, bound, off.AllocMilli, must.Sprintf("instance %d: offline %d > bound %d", it, off.AllocMilli, bound))
		for _, pol := range []string{placement.PolicyRandom, placement.PolicyBestFit, placement.PolicyFGD, placement.PolicyGpushare} {
			got, err := Pack(pol, int64(it), nodes, order, pods, mix) // the online loop: arrival order
			must.NoError(t, err)
			must.LessEq(t, bound, got.AllocMilli, must.Sprintf("instance %d: %s %d > bound %d", it, pol, got.AllocMilli, bound))
		}
	}
}

func TestStrand(t *testing.T) {
	s, err := Snapshot([]Node{{"a", 8000, 1 << 20, 1, "T4"}, {"b", 2000, 1 << 20, 1, "T4"}, {"c", 8000, 1 << 20, 1, "V100"}}, []int{0, 1, 2})
	must.NoError(t, err)
	pol, err := placement.New(placement.PolicyFirstFit, placement.Options{})
	must.NoError(t, err)
	for _, p := range []Pod{gpuPod("frac", 1000, 1, 800), gpuPod("cpu-hog", 2000, 1, 300)} {
		d := pol.Decide(s, Request(p))
		must.True(t, d.Placed())
		must.NoError(t, s.Apply(d))
	}
	// a: 0.2 GPU free (shape); b: 0.7 GPU free, no CPU (CPU/memory);
	// c: a whole V100 that the refused pods may not use (model).
	refused := []Pod{{Name: "r", CPU: 1000, MemoryMiB: 1, NumGPU: 1, GPUMilli: 500, Spec: []string{"T4"}}}
	must.Eq(t, Stranding{FreeMilli: 1900, GPUShape: 200, CPUMemory: 700, Model: 1000}, Strand(s, refused))
	// A refused pod that fits node c counts as fitting.
	refused = append(refused, gpuPod("any", 1000, 1, 1000))
	must.Eq(t, Stranding{FreeMilli: 1900, GPUShape: 200, CPUMemory: 700, Fits: 1000}, Strand(s, refused))
}

func TestGapShare(t *testing.T) {
	must.Eq(t, 25.0, GapShare(95.5, 95, 97))
	must.Eq(t, -50.0, GapShare(94, 95, 97))
	must.True(t, math.IsNaN(GapShare(95.5, 95, 94))) // the reference is below fgd
	must.True(t, math.IsNaN(GapShare(95.5, 95, 95)))
}

func TestLimitSummaries(t *testing.T) {
	res := func(policy string, seed int64, at float64) *Result {
		return &Result{Trace: "default", Policy: policy, Seed: seed, Alloc: curveAt(at, at), Frag: NewCurve(),
			Stranded: Stranding{FreeMilli: 400, GPUShape: 300, CPUMemory: 100}}
	}
	lim := func(seed int64, b int, off, bound float64) Limit {
		return Limit{Trace: "default", Seed: seed, Demand: b, Offline: report.Num(off), Bound: report.Num(bound), Stranded: Stranding{FreeMilli: 100, GPUShape: 100}}
	}
	r := &Report{CapacityMilli: 10000,
		Results: []*Result{res("fgd", 42, 95), res("gpushare", 42, 95.5), res("fgd", 43, 95), res("gpushare", 43, 95.5)},
		Limits:  []Limit{lim(42, 100, 94, 100), lim(42, 130, 96, 100), lim(43, 100, 94, 100), lim(43, 130, 98, 100)}}
	ls := r.LimitSummaries(r.Summaries())
	must.SliceLen(t, 2, ls)
	must.Eq(t, LimitSummary{Trace: "default", Demand: 130, Seeds: 2, Gpushare: 95.5, FGD: 95, Offline: 97, Bound: 100, GapShare: 25, BoundGapShare: 10, OfflineWins: 2}, ls[1])
	must.True(t, math.IsNaN(float64(ls[0].GapShare))) // offline 94 < fgd 95
	must.EqOp(t, 0, ls[0].OfflineWins)
	md := LimitTable(ls).Markdown()
	must.StrContains(t, md, "| default | 130 | 2 | 95.50 | 95.00 | 97.00 | 100.00 | 25.0 | 10.0 | 2/2 |")
	st := r.StrandTable().Markdown()
	must.StrContains(t, st, "| default | gpushare | 4.00 | 3.00 | 1.00 | 0.00 | 0.00 | 25.0 |")
	must.StrContains(t, st, "| default | offline | 1.00 | 1.00 | 0.00 |")
}

// TestBoundAboveOptimum: on tiny instances of one-GPU pods, the bound is
// at least the optimum found by trying every assignment of pods to GPUs.
func TestBoundAboveOptimum(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	milli := []int{100, 190, 200, 300, 500, 600, 700, 810, 1000}
	for it := range 200 {
		var nodes []Node
		var gpuNode []int
		for i := range 1 + rng.Intn(2) {
			g := 1 + rng.Intn(2)
			nodes = append(nodes, Node{"n" + strconv.Itoa(i), int64(2000 * (1 + rng.Intn(4))), 1 << 20, g, []string{"T4", "V100"}[rng.Intn(2)]})
			for range g {
				gpuNode = append(gpuNode, i)
			}
		}
		var pods []Pod
		for i := range 2 + rng.Intn(5) {
			p := gpuPod("p"+strconv.Itoa(i), int64(1000*(1+rng.Intn(4))), 1, milli[rng.Intn(len(milli))])
			if rng.Intn(4) == 0 {
				p.Spec = []string{"V100"}
			}
			pods = append(pods, p)
		}
		best := int64(0)
		where := make([]int, len(pods)) // GPU index, or -1
		var rec func(i int)
		rec = func(i int) {
			if i == len(pods) {
				gpu := make([]int, len(gpuNode))
				cpu := make([]int64, len(nodes))
				var sum int64
				for k, g := range where {
					if g < 0 {
						continue
					}
					n := gpuNode[g]
					gpu[g] += pods[k].GPUMilli
					cpu[n] += pods[k].CPU
					if gpu[g] > 1000 || cpu[n] > nodes[n].CPU || (len(pods[k].Spec) > 0 && pods[k].Spec[0] != nodes[n].Model) {
						return
					}
					sum += pods[k].TotalMilli()
				}
				best = max(best, sum)
				return
			}
			for g := -1; g < len(gpuNode); g++ {
				where[i] = g
				rec(i + 1)
			}
		}
		rec(0)
		must.LessEq(t, UpperBound(nodes, pods), best, must.Sprintf("instance %d: optimum %d above the bound", it, best))
	}
}
