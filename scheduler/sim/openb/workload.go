package openb

import (
	"math/rand"
	"slices"
	"strconv"
	"strings"
)

// Tune is the FGD method's target: arrived GPU demand of 130% of capacity.
const Tune = 1.3

// Workload is what one seed of the FGD method replays.
type Workload struct {
	// Pods in arrival order (shuffled originals, then tuning clones).
	Pods []Pod
	// NodeOrder lists node indices (into the node list) by their random
	// name prefix: ties between equal scores go to the earliest.
	NodeOrder []int
	// CapacityMilli is the cluster's GPU capacity (GPUs x 1000).
	CapacityMilli int64
}

// Generate draws the workload of one seed exactly as the FGD simulator does
// (FGD_METHOD.md section 3, pkg/simulator/core.go and simulator.go at the
// authors' commit): Go's math/rand seeded with seed; one Int(); the pods
// sorted by name and Fisher-Yates shuffled; tuned to tune x capacity (clones
// drawn with replacement from the name-sorted list and appended, stopping at
// the first draw whose per-GPU milli would pass the target; or random pods
// removed until at or below it); then a permutation of the nodes sorted by
// name gives each node its name prefix.
func Generate(nodes []Node, pods []Pod, seed int64, tune float64) Workload {
	rng := rand.New(rand.NewSource(seed))
	_ = rng.Int() // the simulator logs one draw before anything else
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b Pod) int { return strings.Compare(a.Name, b.Name) })
	list := slices.Clone(sorted)
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })

	var capacity, total int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * 1000
	}
	for _, p := range list {
		total += p.TotalMilli()
	}
	target := tune * float64(capacity)
	switch {
	case float64(total) > target:
		for float64(total) > target && len(list) > 0 {
			i := rng.Intn(len(list))
			total -= list[i].TotalMilli()
			list = slices.Delete(list, i, i+1)
		}
	case float64(total) < target:
		for i := 0; ; i++ {
			p := sorted[rng.Intn(len(sorted))]
			// The simulator compares the per-GPU milli, not num_gpu x milli.
			if float64(total+int64(p.GPUMilli)) > target {
				break
			}
			total += p.TotalMilli()
			p.Name += "-tuned-" + strconv.Itoa(i)
			list = append(list, p)
		}
	}

	byName := make([]int, len(nodes))
	for i := range byName {
		byName[i] = i
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(nodes[a].Name, nodes[b].Name) })
	perm := rng.Perm(len(nodes))
	// Node byName[i] gets the prefix perm[i]; ordering by prefix.
	order := make([]int, len(nodes))
	for i, p := range perm {
		order[p] = byName[i]
	}
	return Workload{Pods: list, NodeOrder: order, CapacityMilli: capacity}
}
