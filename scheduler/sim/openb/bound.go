package openb

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// BoundIterations is how many subgradient steps UpperBound takes. Every
// step yields a valid bound; more steps only make it tighter.
const BoundIterations = 4000

// UpperBound returns an upper bound, in GPU milli, on what any packer
// (online or offline, in any order) can allocate of pods on nodes under
// the replay's rules. It is never above min(capacity, demand) of the pods
// that fit some node.
//
// Why it is a bound. Group the nodes into classes of identical nodes
// (model, GPUs, CPU, memory) and the pods into kinds (GPUs, milli, CPU,
// memory, allowed models). A pod of kind i can go to class j only if j's
// model is allowed and one node of j has enough GPUs, CPU and memory
// (A(i)). Any packing gives y[i][j], the pods of kind i on class j, with
//
//	Σ_j y[i][j] ≤ n[i]                       (pods of kind i)
//	Σ_i y[i][j]·use[i][r] ≤ cap[j][r]  r ∈ {GPU milli, CPU, memory}
//
// because per-node capacities sum to the class's; so its allocation
// Σ g[i]·y[i][j] is at most the optimum of this linear program with y
// relaxed to reals. By LP weak duality, for any multipliers λ[j][r] ≥ 0
//
//	LP ≤ D(λ) = Σ_j Σ_r λ[j][r]·G[j] + Σ_i n[i]·max(0, max_{j∈A(i)} g[i] − Σ_r λ[j][r]·G[j]·use[i][r]/cap[j][r])
//
// (the dual's per-kind variable is set to its smallest feasible value;
// resources are scaled by G[j]/cap[j][r] so every λ is of order 1).
// λ = 0 gives the kinds' demand, λ = (1, 0, 0) the capacity; projected
// subgradient steps from there lower D, and the smallest D met is
// returned. The value is valid whatever the step sizes: only its
// tightness depends on them. The result is the smaller of that and
// ShapeBound, which the relaxation cannot see.
func UpperBound(nodes []Node, pods []Pod) int64 {
	var capacity int64
	for _, n := range nodes {
		capacity += int64(n.GPUs) * 1000
	}
	return min(lpBound(nodes, pods), ShapeBound(capacity, pods))
}

// lpBound is the dual bound of the linear relaxation (see UpperBound).
func lpBound(nodes []Node, pods []Pod) int64 {
	type class struct {
		model string
		cap   [3]float64 // GPU milli, CPU, memory of all its nodes
		node  [3]int64   // one node's GPUs (count), CPU, memory
	}
	type kind struct {
		n     float64
		g     float64 // GPU milli per pod
		use   [3]float64
		allow []int
	}
	var classes []class
	ci := map[string]int{}
	for _, n := range nodes {
		if n.GPUs == 0 {
			continue
		}
		k := strings.Join([]string{n.Model, itoa(int64(n.GPUs)), itoa(n.CPU), itoa(n.MemoryMiB)}, "/")
		i, ok := ci[k]
		if !ok {
			i = len(classes)
			ci[k] = i
			classes = append(classes, class{model: n.Model, node: [3]int64{int64(n.GPUs), n.CPU, n.MemoryMiB}})
		}
		c := &classes[i]
		c.cap[0] += float64(n.GPUs) * 1000
		c.cap[1] += float64(n.CPU)
		c.cap[2] += float64(n.MemoryMiB)
	}
	var kinds []kind
	ki := map[string]int{}
	for _, p := range pods {
		if p.TotalMilli() == 0 {
			continue // CPU-only pods add nothing and only take resources
		}
		k := kindKey(p)
		i, ok := ki[k]
		if !ok {
			i = len(kinds)
			ki[k] = i
			kd := kind{g: float64(p.TotalMilli()), use: [3]float64{float64(p.TotalMilli()), float64(p.CPU), float64(p.MemoryMiB)}}
			for j, c := range classes {
				if (len(p.Spec) == 0 || slices.Contains(p.Spec, c.model)) && int64(p.NumGPU) <= c.node[0] &&
					p.CPU <= c.node[1] && p.MemoryMiB <= c.node[2] {
					kd.allow = append(kd.allow, j)
				}
			}
			kinds = append(kinds, kd)
		}
		kinds[i].n++
	}
	// coef[i][a][r] = G[j]·use[i][r]/cap[j][r] for j = allow[a].
	coef := make([][][3]float64, len(kinds))
	for i, k := range kinds {
		coef[i] = make([][3]float64, len(k.allow))
		for a, j := range k.allow {
			for r := range 3 {
				if classes[j].cap[r] > 0 {
					coef[i][a][r] = classes[j].cap[0] * k.use[r] / classes[j].cap[r]
				}
			}
		}
	}
	lambda := make([][3]float64, len(classes))
	used := make([][3]float64, len(classes))
	dual := func() float64 {
		for j := range used {
			used[j] = [3]float64{}
		}
		d := 0.0
		for j, c := range classes {
			d += (lambda[j][0] + lambda[j][1] + lambda[j][2]) * c.cap[0]
		}
		for i, k := range kinds {
			best, arg := 0.0, -1
			for a, j := range k.allow {
				v := k.g - lambda[j][0]*coef[i][a][0] - lambda[j][1]*coef[i][a][1] - lambda[j][2]*coef[i][a][2]
				if v > best {
					best, arg = v, j
				}
			}
			if arg >= 0 {
				d += k.n * best
				for r := range 3 {
					used[arg][r] += k.n * k.use[r]
				}
			}
		}
		return d
	}
	best := dual() // λ = 0: the demand of the pods that fit somewhere
	for _, k := range kinds {
		for _, j := range k.allow {
			lambda[j][0] = 1 // classes no pod can use stay at 0
		}
	}
	best = min(best, dual()) // the capacity of the classes some pod fits
	for it := range BoundIterations {
		step := 0.5 / math.Sqrt(float64(it+1))
		for j, c := range classes {
			for r := range 3 {
				// ∂D/∂λ = G[j]·(1 − used/cap): step along it, scaled by G[j].
				g := 1 - used[j][r]/c.cap[r]
				lambda[j][r] = max(0, lambda[j][r]-step*g)
			}
		}
		best = min(best, dual())
	}
	return int64(math.Floor(best + 1e-3))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// ShapeBound bounds the GPU milli any packer can allocate of pods on
// capacityMilli of GPUs from the shape of fractional requests alone.
//
// Why it is a bound. Pick a size m0 > 500 milli. Fractional pods of at
// least m0 ("big") never share a GPU with each other, and the rest of a
// big pod's GPU, at most 1000 − m0, can hold only pods of at most
// 1000 − m0 ("small", total S). If a packing places the big pods X, their
// GPUs hold Σ_X m plus at most min(W, S) of small pods, where W =
// Σ_X (1000 − m), and the other GPUs at most their capacity, so it
// allocates at most C − W + min(W, S) = C − max(0, W − S); and at most the
// demand D less the big pods left out. For a given number k of big pods
// placed both limits are loosest for the k largest, so the bound for m0 is
// the largest over k of the smaller limit, and ShapeBound is the smallest
// over every m0 (and at most min(C, D)).
func ShapeBound(capacityMilli int64, pods []Pod) int64 {
	var demand int64
	var sizes []int64 // fractional sizes above 500 milli, largest first
	for _, p := range pods {
		demand += p.TotalMilli()
		if p.NumGPU == 1 && p.GPUMilli > 500 && p.GPUMilli < 1000 {
			sizes = append(sizes, int64(p.GPUMilli))
		}
	}
	slices.SortFunc(sizes, func(a, b int64) int { return cmp.Compare(b, a) })
	best := min(capacityMilli, demand)
	for i := range sizes {
		if i > 0 && sizes[i] == sizes[i-1] {
			continue
		}
		m0 := sizes[i]
		var small int64
		for _, p := range pods {
			if p.NumGPU == 1 && p.GPUMilli > 0 && int64(p.GPUMilli) <= 1000-m0 {
				small += int64(p.GPUMilli)
			}
		}
		big := sizes[:i] // the sizes >= m0: those before i, and i's run
		for j := i; j < len(sizes) && sizes[j] == m0; j++ {
			big = sizes[:j+1]
		}
		var bigTotal int64
		for _, m := range big {
			bigTotal += m
		}
		var w, placed, at int64
		at = min(capacityMilli, demand-bigTotal) // k = 0
		for _, m := range big {
			w += 1000 - m
			placed += m
			at = max(at, min(capacityMilli-max(0, w-small), demand-(bigTotal-placed)))
		}
		best = min(best, at)
	}
	return best
}
