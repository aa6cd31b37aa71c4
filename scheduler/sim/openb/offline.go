package openb

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// LimitBins are the points of arrived demand (% of capacity) at which the
// references are computed: the two the report and the validation use.
var LimitBins = []int{100, MaxDemand}

// OfflinePolicies are the placement-core policies the offline packer runs
// on each of its orders; the reference is the best packing. All see the
// same snapshot and the same rules as the online replay (CPU, memory, GPU
// models, fractions on one GPU, whole GPUs for multi-GPU pods).
var OfflinePolicies = []string{placement.PolicyFGD, placement.PolicyGpushare}

// Orders of the offline packer: both are largest GPU demand first; among
// pods of equal GPU demand, Heavy takes the most CPU and memory first and
// Lean the least (neither wins on every trace).
const (
	OrderHeavy = "largest-first/heavy"
	OrderLean  = "largest-first/lean"
)

// Prefix returns how many of the workload's pods had arrived at the end of
// bin b of arrived demand, binned as Replay bins them: the pods the online
// replay had seen when it left that bin (all pods for b >= MaxDemand).
func Prefix(w Workload, b int) int {
	if b >= MaxDemand {
		return len(w.Pods)
	}
	var arrived int64
	n := 0
	for i, p := range w.Pods {
		arrived += p.TotalMilli()
		if int(math.RoundToEven(float64(arrived)/(float64(w.CapacityMilli)/100))) > b {
			break
		}
		n = i + 1
	}
	return n
}

// LargestFirst returns the pods in one of the offline packer's orders: GPU
// demand (num_gpu x gpu_milli) descending, then CPU and memory descending
// (OrderHeavy) or ascending (OrderLean), then by name; the order does not
// depend on the arrival order.
func LargestFirst(pods []Pod, order string) []Pod {
	out := slices.Clone(pods)
	sign := 1
	if order == OrderLean {
		sign = -1
	}
	slices.SortStableFunc(out, func(a, b Pod) int {
		if c := cmp.Compare(b.TotalMilli(), a.TotalMilli()); c != 0 {
			return c
		}
		if c := cmp.Compare(b.CPU, a.CPU); c != 0 {
			return sign * c
		}
		if c := cmp.Compare(b.MemoryMiB, a.MemoryMiB); c != 0 {
			return sign * c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Packing is what a packer placed.
type Packing struct {
	Policy, Order string
	// AllocMilli is the GPU milli of the placed pods.
	AllocMilli int64
	Placed     int
	// Stranded is why the capacity the packer left free stayed free.
	Stranded Stranding
}

// Pack places the pods in the given order with one placement-core policy on
// an empty cluster (nodes in the workload's node order) and returns what it
// placed. It is the online replay's loop without the bins: the offline
// packer calls it with LargestFirst.
func Pack(policy string, seed int64, nodes []Node, order []int, pods []Pod, mix placement.Mix) (Packing, error) {
	s, err := Snapshot(nodes, order)
	if err != nil {
		return Packing{}, err
	}
	pol, err := placement.New(policy, placement.Options{Seed: uint64(seed), Mix: mix})
	if err != nil {
		return Packing{}, err
	}
	out := Packing{Policy: policy}
	var refused []Pod
	for _, p := range pods {
		d := pol.Decide(s, Request(p))
		if !d.Placed() {
			refused = append(refused, p)
			continue
		}
		if err := s.Apply(d); err != nil {
			return Packing{}, fmt.Errorf("offline %s: %w", policy, err)
		}
		out.AllocMilli += p.TotalMilli()
		out.Placed++
	}
	out.Stranded = Strand(s, refused)
	return out, nil
}

// Offline is the offline reference packer: it sees every pod at once,
// sorts them in both LargestFirst orders and packs each with every one of
// OfflinePolicies, keeping the best packing (the first on ties).
func Offline(seed int64, nodes []Node, w Workload, pods []Pod, mix placement.Mix) (Packing, error) {
	var best Packing
	found := false
	for _, order := range []string{OrderHeavy, OrderLean} {
		sorted := LargestFirst(pods, order)
		for _, pol := range OfflinePolicies {
			p, err := Pack(pol, seed, nodes, w.NodeOrder, sorted, mix)
			if err != nil {
				return Packing{}, err
			}
			p.Order = order
			if !found || p.AllocMilli > best.AllocMilli {
				best, found = p, true
			}
		}
	}
	return best, nil
}
