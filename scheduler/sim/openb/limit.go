package openb

import (
	"fmt"
	"strconv"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// Limit is how far from the limit one seed of one trace is at one point
// of arrived demand: the offline reference packer and the upper bound on
// the pods that had arrived when the online replay left that bin.
type Limit struct {
	Trace  string `json:"trace"`
	Seed   int64  `json:"seed"`
	Demand int    `json:"arrived_demand"`
	// Arrived is the GPU demand of those pods (% of capacity).
	Arrived report.Num `json:"arrived"`
	Pods    int        `json:"pods"`
	// Offline is the offline packer's allocation ratio (%), by the policy
	// and order named.
	Offline       report.Num `json:"offline"`
	OfflinePolicy string     `json:"offline_policy"`
	OfflineOrder  string     `json:"offline_order"`
	// Bound is UpperBound's allocation ratio (%).
	Bound report.Num `json:"bound"`
	// Stranded is why the capacity the offline packer left free stayed
	// free.
	Stranded Stranding `json:"offline_stranded"`
}

// Limits computes the references of one workload at every LimitBins point.
func Limits(trace string, seed int64, nodes []Node, w Workload, mix placement.Mix) ([]Limit, error) {
	var out []Limit
	capacity := float64(w.CapacityMilli)
	for _, b := range LimitBins {
		pods := w.Pods[:Prefix(w, b)]
		var arrived int64
		for _, p := range pods {
			arrived += p.TotalMilli()
		}
		off, err := Offline(seed, nodes, w, pods, mix)
		if err != nil {
			return nil, fmt.Errorf("%s seed %d at %d%%: %w", trace, seed, b, err)
		}
		out = append(out, Limit{Trace: trace, Seed: seed, Demand: b, Arrived: report.Num(100 * float64(arrived) / capacity), Pods: len(pods),
			Offline: report.Num(100 * float64(off.AllocMilli) / capacity), OfflinePolicy: off.Policy, OfflineOrder: off.Order,
			Bound: report.Num(100 * float64(UpperBound(nodes, pods)) / capacity), Stranded: off.Stranded})
	}
	return out, nil
}

// LimitSummary sets gpushare and fgd beside the references on one trace at
// one point of arrived demand, as means over seeds.
type LimitSummary struct {
	Trace    string     `json:"trace"`
	Demand   int        `json:"arrived_demand"`
	Seeds    int        `json:"seeds"`
	Gpushare report.Num `json:"gpushare"`
	FGD      report.Num `json:"fgd"`
	Offline  report.Num `json:"offline"`
	Bound    report.Num `json:"bound"`
	// GapShare is gpushare's share (%) of the gap fgd leaves to the
	// offline packer, (gpushare − fgd) / (offline − fgd) of the means; NaN
	// when the offline packer is not above fgd. BoundGapShare is the same
	// against the upper bound.
	GapShare      report.Num `json:"gap_share"`
	BoundGapShare report.Num `json:"bound_gap_share"`
	// OfflineWins counts the seeds on which the offline packer allocated
	// more than fgd.
	OfflineWins int `json:"seeds_offline_above_fgd"`
}

// GapShare is (online − base) / (ref − base) in percent, NaN unless ref >
// base.
func GapShare(online, base, ref float64) float64 {
	if !(ref > base) {
		return nan()
	}
	return 100 * (online - base) / (ref - base)
}

// LimitSummaries averages the limits per trace and demand, in run order,
// beside gpushare's and fgd's means at the same point.
func (r *Report) LimitSummaries(sums []Summary) []LimitSummary {
	curve := map[[2]string]Curve{}
	for _, s := range sums {
		curve[[2]string{s.Trace, s.Policy}] = s.Curve
	}
	fgdAt := map[string]float64{} // trace/seed/demand
	for _, res := range r.Results {
		if res.Policy == placement.PolicyFGD {
			for _, b := range LimitBins {
				fgdAt[limitKey(res.Trace, res.Seed, b)] = res.Alloc[b]
			}
		}
	}
	var out []LimitSummary
	index := map[[2]string]int{}
	var sumOff, sumBound []float64
	for _, l := range r.Limits {
		k := [2]string{l.Trace, strconv.Itoa(l.Demand)}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, LimitSummary{Trace: l.Trace, Demand: l.Demand})
			sumOff, sumBound = append(sumOff, 0), append(sumBound, 0)
		}
		out[i].Seeds++
		sumOff[i] += float64(l.Offline)
		sumBound[i] += float64(l.Bound)
		if f, ok := fgdAt[limitKey(l.Trace, l.Seed, l.Demand)]; ok && float64(l.Offline) > f {
			out[i].OfflineWins++
		}
	}
	for i := range out {
		s := &out[i]
		s.Offline, s.Bound = report.Num(sumOff[i]/float64(s.Seeds)), report.Num(sumBound[i]/float64(s.Seeds))
		s.Gpushare, s.FGD = report.Num(nan()), report.Num(nan())
		if c, ok := curve[[2]string{s.Trace, placement.PolicyGpushare}]; ok {
			s.Gpushare = report.Num(c[s.Demand])
		}
		if c, ok := curve[[2]string{s.Trace, placement.PolicyFGD}]; ok {
			s.FGD = report.Num(c[s.Demand])
		}
		s.GapShare = report.Num(GapShare(float64(s.Gpushare), float64(s.FGD), float64(s.Offline)))
		s.BoundGapShare = report.Num(GapShare(float64(s.Gpushare), float64(s.FGD), float64(s.Bound)))
	}
	return out
}

func limitKey(trace string, seed int64, b int) string {
	return trace + "/" + strconv.FormatInt(seed, 10) + "/" + strconv.Itoa(b)
}

// LimitsIntro explains the references in openb.md.
const LimitsIntro = "The same pods the online replay had seen when it left the 100% and the 130% bin of arrived demand, packed by two references. " +
	"**offline**: an offline packer that sees all those pods at once, sorts them largest GPU demand first (two orders: among equal GPU demand the most CPU and memory first, or the least) " +
	"and places them one by one with the placement core's fgd and gpushare policies, so CPU, memory, GPU models, fractions on one GPU and whole GPUs for multi-GPU pods " +
	"are checked exactly as online; the best of the four packings counts. It is a reference, not an optimum: where it is not above fgd (see the last column) the gap share is not defined. " +
	"**bound**: an upper bound on what any packer can allocate of those pods, the smaller of two. (1) The dual of a linear relaxation that groups nodes into classes of identical nodes and caps every class's " +
	"GPU milli, CPU and memory, a pod going only to classes whose nodes can hold it (weak duality makes any dual point a bound; subgradient steps tighten it). " +
	"(2) A shape bound: pods above half a GPU never share a GPU, and the rest of such a GPU can hold only pods no larger than that rest; whatever set of them a packer places, " +
	"the holes that the small pods cannot fill are lost (the best choice of that set is taken, for every size threshold). " +
	"The gap share is gpushare's share of the gap fgd leaves to the reference: (gpushare − fgd) / (reference − fgd) of the means over seeds."

// StrandIntro explains the stranding table in openb.md.
const StrandIntro = "free GPU capacity at the end of the replay, by why no refused pod could use it: GPU shape (no refused pod's GPU request fits the node's free GPUs: fractions too small, " +
	"too few whole GPUs), CPU/memory (some refused pod's GPUs fit but its CPU or memory does not), model (no refused pod may use the node's model), fits (a refused pod would fit: the policy refused it)."

// LimitTable shows gpushare and fgd beside the references.
func LimitTable(ls []LimitSummary) report.Table {
	t := report.Table{Header: []string{"trace", "demand %", "seeds", "gpushare", "fgd", "offline", "bound",
		"gpushare share of fgd→offline gap %", "gpushare share of fgd→bound gap %", "seeds offline > fgd"}}
	for _, l := range ls {
		t.Rows = append(t.Rows, []string{l.Trace, strconv.Itoa(l.Demand), strconv.Itoa(l.Seeds), report.F(l.Gpushare), report.F(l.FGD),
			report.F(l.Offline), report.F(l.Bound), report.F1(l.GapShare), report.F1(l.BoundGapShare), fmt.Sprintf("%d/%d", l.OfflineWins, l.Seeds)})
	}
	return t
}

// LimitSeedTable lists every seed's references.
func LimitSeedTable(ls []Limit) report.Table {
	t := report.Table{Header: []string{"trace", "seed", "demand %", "arrived %", "pods", "offline", "offline policy", "offline order", "bound"}}
	for _, l := range ls {
		t.Rows = append(t.Rows, []string{l.Trace, strconv.FormatInt(l.Seed, 10), strconv.Itoa(l.Demand), report.F(l.Arrived), strconv.Itoa(l.Pods),
			report.F(l.Offline), l.OfflinePolicy, l.OfflineOrder, report.F(l.Bound)})
	}
	return t
}

// StrandTable shows, per trace, how much GPU capacity (% of capacity, mean
// over seeds) gpushare, fgd and the offline packer leave free at 130%
// arrived demand and why (see Stranding).
func (r *Report) StrandTable() report.Table {
	t := report.Table{Header: []string{"trace", "packer", "free %", "GPU shape %", "CPU/memory %", "model %", "fits a refused pod %", "CPU/memory share of free %"}}
	type acc struct {
		st Stranding
		n  int
	}
	var order [][2]string
	rows := map[[2]string]*acc{}
	add := func(trace, packer string, st Stranding) {
		k := [2]string{trace, packer}
		a, ok := rows[k]
		if !ok {
			a = &acc{}
			rows[k] = a
			order = append(order, k)
		}
		a.st.FreeMilli += st.FreeMilli
		a.st.GPUShape += st.GPUShape
		a.st.CPUMemory += st.CPUMemory
		a.st.Model += st.Model
		a.st.Fits += st.Fits
		a.n++
	}
	for _, res := range r.Results {
		if res.Policy == placement.PolicyGpushare || res.Policy == placement.PolicyFGD {
			add(res.Trace, res.Policy, res.Stranded)
		}
	}
	for _, l := range r.Limits {
		if l.Demand == MaxDemand {
			add(l.Trace, "offline", l.Stranded)
		}
	}
	capacity := float64(r.CapacityMilli)
	pct := func(v int64, n int) string { return report.F(100 * float64(v) / float64(n) / capacity) }
	for _, k := range order {
		a := rows[k]
		share := nan()
		if a.st.FreeMilli > 0 {
			share = 100 * float64(a.st.CPUMemory) / float64(a.st.FreeMilli)
		}
		t.Rows = append(t.Rows, []string{k[0], k[1], pct(a.st.FreeMilli, a.n), pct(a.st.GPUShape, a.n), pct(a.st.CPUMemory, a.n),
			pct(a.st.Model, a.n), pct(a.st.Fits, a.n), report.F1(share)})
	}
	return t
}
