package openb

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim"
)

// SharesPerGPU is the GPU granularity of the replay. openb requests are in
// thousandths of a GPU, all multiples of 10 (ReadPods checks), so shares of
// 1/100 GPU are exact; they keep share IDs ten times fewer than milli would.
const SharesPerGPU = 100

// Coverage is the share of pods the typical-pod mix covers (FGD: 95%).
const Coverage = 0.95

// Result is one replay: one policy on one seed of one trace.
type Result struct {
	Trace  string `json:"trace"`
	Policy string `json:"policy"`
	Seed   int64  `json:"seed"`
	// Alloc is the GPU allocation ratio (%) per bin of arrived demand,
	// binned as the FGD authors' merge_alloc_discrete.py does.
	Alloc Curve `json:"-"`
	// Frag is the fragmentation ratio (% of idle GPU capacity that the
	// typical pods could not use), binned like Alloc
	// (merge_frag_ratio_discrete.py).
	Frag   Curve `json:"-"`
	Pods   int   `json:"pods"`
	Placed int   `json:"placed"`
	// MultiGPU counts placed multi-GPU pods; BestCell those whose GPUs have
	// the best worst link their node's topology allows for that many GPUs.
	MultiGPU int `json:"multi_gpu"`
	BestCell int `json:"best_cell"`
	// Migrations counts the running pods moved (ReplayMigrate only).
	Migrations int `json:"migrations,omitempty"`
	// Stranded says why the GPU capacity left free at the end stayed free.
	Stranded Stranding `json:"stranded"`
}

// BestCellShare is BestCell/MultiGPU in percent (NaN without multi-GPU pods).
func (r *Result) BestCellShare() float64 {
	if r.MultiGPU == 0 {
		return math.NaN()
	}
	return 100 * float64(r.BestCell) / float64(r.MultiGPU)
}

// TopologyFor is the link matrix given to an openb node with that many GPUs
// (openb lists none): the DGX-1 V100 hybrid cube-mesh for 8 GPUs, the
// two-socket PCIe server for 4; smaller nodes are all NV1 (any choice is
// as good as another).
func TopologyFor(gpus int) string {
	switch gpus {
	case 8:
		return topologies.DGX1V100
	case 4:
		return topologies.PCIe2Socket
	}
	return ""
}

// Request turns a pod into a placement request with shares of 1/1000 GPU.
func Request(p Pod) placement.Request {
	r := placement.Request{ID: p.Name, Count: 1, Res: placement.Resources{CPU: p.CPU, MemoryMiB: p.MemoryMiB}, Models: p.Spec}
	switch {
	case p.NumGPU == 1 && p.GPUMilli < 1000:
		r.Shares = p.GPUMilli * SharesPerGPU / 1000
	default:
		r.Shares = p.NumGPU * SharesPerGPU
	}
	return r
}

// Mix is the expected mix of requests from the original, untuned pod list,
// CPU-only pods included: the most popular kinds covering the given share
// of pods (FGD's typical pods: Coverage, 95%).
func Mix(pods []Pod, coverage float64) placement.Mix {
	reqs := make([]placement.Request, len(pods))
	for i, p := range pods {
		reqs[i] = Request(p)
	}
	return placement.MixFromRequests(reqs, coverage)
}

// Snapshot builds the cluster with nodes added in the given order (the
// order in which equal scores are broken).
func Snapshot(nodes []Node, order []int) (*placement.Snapshot, error) {
	return snapshotOf(nodes, order, false, false)
}

// snapshotOf is Snapshot, its nodes with one device group per GPU whose
// plugin composes several in one task when multi (ContractGPUNodeMulti,
// ContractGPUNodeMultiPick, ContractGPUNodeRank), fingerprinting cell
// ranks when ranked (ContractGPUNodeRank).
func snapshotOf(nodes []Node, order []int, multi, ranked bool) (*placement.Snapshot, error) {
	s := placement.NewSnapshot()
	for _, i := range order {
		n := nodes[i]
		nd, err := sim.NodeFromSpec(sim.NodeSpec{ID: n.Name, CPU: n.CPU, MemoryMiB: n.MemoryMiB,
			GPUs: n.GPUs, Model: n.Model, Topology: TopologyFor(n.GPUs), SharesPerGPU: SharesPerGPU, PerGPU: multi, MultiGPU: multi, CellRanks: ranked})
		if err != nil {
			return nil, err
		}
		if err := s.AddNode(nd); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Replay runs one policy over one workload. mix is the typical-pod mix of
// the original trace; progress, when not nil, is called every 1000 pods.
func Replay(trace, policy string, seed int64, nodes []Node, w Workload, mix placement.Mix, progress func(done, total int)) (*Result, error) {
	return replay(trace, policy, seed, nodes, w, mix, progress, 0, ContractModel)
}

// ReplayMigrate is Replay with a budget of migrations (not the FGD
// method): when the policy refuses a GPU pod, one running fractional pod
// whose removal makes room may be moved, if the policy places both, up to
// MigrationBudget of the workload's pods.
func ReplayMigrate(trace, policy string, seed int64, nodes []Node, w Workload, mix placement.Mix) (*Result, error) {
	return replay(trace, policy, seed, nodes, w, mix, nil, int(MigrationBudget*float64(len(w.Pods))), ContractModel)
}

func replay(trace, policy string, seed int64, nodes []Node, w Workload, mix placement.Mix, progress func(done, total int), budget int, contract string) (*Result, error) {
	s, err := snapshotOf(nodes, w.NodeOrder, composes(contract), contract == ContractGPUNodeRank)
	if err != nil {
		return nil, err
	}
	pol, err := placement.New(policy, placement.Options{Seed: uint64(seed), Mix: mix})
	if err != nil {
		return nil, err
	}
	res := &Result{Trace: trace, Policy: policy, Seed: seed, Pods: len(w.Pods)}
	bins := binner{capacity: float64(w.CapacityMilli)}
	fbins := binner{capacity: float64(w.CapacityMilli)}
	best := bestLinks{}
	var arrived, used int64
	frag := newFragTracker(s, mix)
	var refused []Pod
	var mig *migrator
	if budget > 0 {
		mig = newMigrator(budget)
	}
	offer := newOffer(contract, seed)
	for i, p := range w.Pods {
		d := offer.decide(s, pol, p)
		arrived += p.TotalMilli()
		placed := d.Placed()
		if placed {
			if err := s.Apply(d); err != nil {
				return nil, fmt.Errorf("%s seed %d: %w", policy, seed, err)
			}
			if mig != nil {
				mig.placed(d, p)
			}
		} else if mig != nil {
			var moved []string
			if d, moved, placed = mig.try(s, pol, p); placed {
				res.Migrations++
				for _, id := range moved {
					frag.update(s, id)
				}
			}
		}
		if !placed {
			refused = append(refused, p)
		} else {
			used += p.TotalMilli()
			res.Placed++
			for _, pl := range d.Placements {
				frag.update(s, pl.Node)
			}
			if p.NumGPU > 1 {
				res.MultiGPU++
				if ok, err := best.isBest(s, d.Placements[0]); err != nil {
					return nil, err
				} else if ok {
					res.BestCell++
				}
			}
		}
		b := bins.add(arrived, used)
		fbins.addValue(b, frag.ratio())
		if progress != nil && (i+1)%1000 == 0 {
			progress(i+1, len(w.Pods))
		}
	}
	res.Alloc = bins.curve()
	res.Frag = fbins.curve()
	res.Stranded = Strand(s, refused)
	return res, nil
}

// binner reproduces merge_alloc_discrete.py: every event's arrived% is
// round(arrived / (capacity/100)) with Python's round (half to even), its
// alloc% round(100 x used / capacity, 2); a bin is the mean alloc% of its
// events, else that of bin x-1, else x+1, rounded to 2 decimals.
type binner struct {
	capacity float64
	sum      [MaxDemand + 1]float64
	n        [MaxDemand + 1]int
}

func (b *binner) add(arrived, used int64) int {
	x := int(math.RoundToEven(float64(arrived) / (b.capacity / 100)))
	b.addValue(x, round2(100*float64(used)/b.capacity))
	return x
}

// addValue records one event's value in bin x.
func (b *binner) addValue(x int, v float64) {
	if x < 0 || x > MaxDemand {
		return
	}
	b.sum[x] += v
	b.n[x]++
}

func (b *binner) mean(x int) (float64, bool) {
	if x < 0 || x > MaxDemand || b.n[x] == 0 {
		return 0, false
	}
	return b.sum[x] / float64(b.n[x]), true
}

func (b *binner) curve() Curve {
	c := NewCurve()
	for x := range c {
		for _, y := range []int{x, x - 1, x + 1} {
			if v, ok := b.mean(y); ok {
				c[x] = round2(v)
				break
			}
		}
	}
	return c
}

func round2(v float64) float64 { return math.RoundToEven(v*100) / 100 }

// bestLinks caches, per topology and GPU count, the best worst link any set
// of that many GPUs has.
type bestLinks map[string]devicefn.Link

func (b bestLinks) isBest(s *placement.Snapshot, p placement.Placement) (bool, error) {
	n, ok := s.Node(p.Node)
	if !ok {
		return false, fmt.Errorf("placement on unknown node %q", p.Node)
	}
	topo := TopologyFor(len(n.GPUs))
	if topo == "" {
		return true, nil // every pair is alike
	}
	t, err := topologies.Get(topo)
	if err != nil {
		return false, err
	}
	idx := make([]int, len(p.GPUs))
	for i, u := range p.GPUs {
		k := strings.LastIndexByte(u, '-')
		if idx[i], err = strconv.Atoi(u[k+1:]); err != nil {
			return false, fmt.Errorf("GPU %q: %w", u, err)
		}
	}
	key := topo + "/" + strconv.Itoa(len(idx))
	want, ok := b[key]
	if !ok {
		want = BestWorst(t.Links, len(idx))
		b[key] = want
	}
	return cells.Worst(t.Links, idx) == want, nil
}

// BestWorst returns the best worst link over all sets of k GPUs of m.
func BestWorst(m devicefn.Matrix, k int) devicefn.Link {
	best, found := devicefn.Link{}, false
	pick := make([]int, 0, k)
	var rec func(start int)
	rec = func(start int) {
		if len(pick) == k {
			w := cells.Worst(m, pick)
			if !found || w.Better(best) {
				best, found = w, true
			}
			return
		}
		for i := start; i <= len(m)-(k-len(pick)); i++ {
			pick = append(pick, i)
			rec(i + 1)
			pick = pick[:len(pick)-1]
		}
	}
	rec(0)
	return best
}
