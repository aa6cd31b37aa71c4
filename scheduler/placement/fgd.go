package placement

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Typical is one kind of request in the expected mix that fragmentation is
// measured against (FGD's "typical pods").
type Typical struct {
	CPU int64 `json:"cpu"`
	// MemoryMiB is the kind's memory; FGD ignores memory, gpushare counts
	// a node's free GPUs as fragmented for the kind when its free memory
	// is short (0: any).
	MemoryMiB int64 `json:"memory_mib,omitempty"`
	// Shares is the request's shares (a fraction, or whole GPUs as a
	// multiple of shares_per_gpu); 0 is a CPU-only request.
	Shares int      `json:"shares"`
	Models []string `json:"models,omitempty"`
	// Weight is the kind's share of requests; a mix's weights sum to 1.
	Weight float64 `json:"weight"`
}

// Mix is the expected mix of requests.
type Mix []Typical

// DefaultMix is used when no mix is configured: quarter, half and whole
// GPUs and 2-, 4- and 8-GPU jobs, shaped like the openb traces (shares of
// 100 per GPU).
func DefaultMix() Mix {
	return Mix{
		{Shares: 25, Weight: 0.15}, {Shares: 50, Weight: 0.2}, {Shares: 100, Weight: 0.4},
		{Shares: 200, Weight: 0.1}, {Shares: 400, Weight: 0.1}, {Shares: 800, Weight: 0.05},
	}
}

// MixFromRequests derives the mix from past requests as FGD does: requests
// are keyed by (CPU, shares, models), the most popular keys are kept until
// they cover the given fraction of requests (FGD uses 0.95), and their
// frequencies are renormalised. Each kind's memory is the median memory of
// its requests (FGD's key leaves memory out, so the kinds stay FGD's).
func MixFromRequests(reqs []Request, coverage float64) Mix {
	type key struct {
		cpu    int64
		shares int
		models string
	}
	count := map[key]int{}
	mems := map[key][]int64{}
	for _, r := range reqs {
		k := key{r.Res.CPU, r.Shares, strings.Join(r.Models, "|")}
		count[k] += max(r.Count, 1)
		mems[k] = append(mems[k], r.Res.MemoryMiB)
	}
	keys := make([]key, 0, len(count))
	total := 0
	for k, c := range count {
		keys = append(keys, k)
		total += c
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(count[b], count[a]); c != 0 {
			return c
		}
		if c := cmp.Compare(b.cpu, a.cpu); c != 0 {
			return c
		}
		if c := cmp.Compare(b.shares, a.shares); c != 0 {
			return c
		}
		return strings.Compare(b.models, a.models)
	})
	var mix Mix
	sum := 0
	for _, k := range keys {
		if total > 0 && float64(sum) >= coverage*float64(total) {
			break
		}
		ms := mems[k]
		slices.Sort(ms)
		t := Typical{CPU: k.cpu, MemoryMiB: ms[len(ms)/2], Shares: k.shares, Weight: float64(count[k])}
		if k.models != "" {
			t.Models = strings.Split(k.models, "|")
		}
		mix = append(mix, t)
		sum += count[k]
	}
	for i := range mix {
		mix[i].Weight /= float64(sum)
	}
	return mix
}

// Validate checks the weights.
func (m Mix) Validate() error {
	sum := 0.0
	for _, t := range m {
		if t.Weight < 0 || t.Shares < 0 || t.CPU < 0 {
			return fmt.Errorf("mix entry %+v has a negative value", t)
		}
		sum += t.Weight
	}
	if len(m) > 0 && (sum < 0.99 || sum > 1.01) {
		return fmt.Errorf("mix weights sum to %.3f, want 1", sum)
	}
	return nil
}

// fgdSummary caches, for one node at one version, what the fragmentation
// of each typical request depends on.
type fgdSummary struct {
	version uint64
	valid   bool
	total   int // free shares on the node
	per     []fgdEntry
	frag    float64 // F(n) in shares
}

type fgdEntry struct {
	cnt     int32 // eligible GPUs that can hold the typical request's per-GPU need
	small   int32 // free shares of eligible GPUs too small for it
	nonElig int32 // free shares of GPUs of other models
}

// need returns the per-GPU shares and GPU count of typical t on a GPU with
// spg shares; k = 0 for CPU-only or impossible kinds.
func (t *Typical) need(spg int) (need, k int) {
	frac, whole, ok := shareSize(t.Shares, spg)
	switch {
	case !ok || t.Shares == 0:
		return 0, 0
	case frac > 0:
		return frac, 1
	}
	return spg, whole
}

func (t *Typical) eligible(model string) bool {
	if len(t.Models) == 0 {
		return true
	}
	return slices.Contains(t.Models, model)
}

func (f *fgd) summary(n *Node) *fgdSummary {
	s := &f.cache[n.idx]
	if s.valid && s.version == n.version {
		return s
	}
	s.valid, s.version = true, n.version
	if cap(s.per) < len(f.mix) {
		s.per = make([]fgdEntry, len(f.mix))
	}
	s.per = s.per[:len(f.mix)]
	s.total = 0
	for i := range n.GPUs {
		s.total += n.GPUs[i].free
	}
	for m := range f.mix {
		t := &f.mix[m]
		var e fgdEntry
		for i := range n.GPUs {
			g := &n.GPUs[i]
			need, k := f.need(m, g.Shares)
			need = instanceNeed(g, need)
			switch {
			case k == 0 || !t.eligible(g.Model):
				e.nonElig += int32(g.free)
			case g.free >= need:
				e.cnt++
			default:
				e.small += int32(g.free)
			}
		}
		s.per[m] = e
	}
	s.frag = 0
	free := n.Free()
	for m := range f.mix {
		s.frag += f.mix[m].Weight * float64(f.frag(m, s.per[m], s.total, free, n))
	}
	return s
}

type fgd struct {
	mix Mix
	// memory makes a kind's fit need its memory too (gpushare); FGD
	// checks only GPUs and CPU.
	memory  bool
	cache   []fgdSummary
	needs   []needMemo
	rows    []mixRow
	rowsSPG int
}

// needMemo remembers Typical.need for one shares-per-GPU value.
type needMemo struct{ spg, need, k int }

func (f *fgd) need(m, spg int) (need, k int) {
	if len(f.needs) != len(f.mix) {
		f.needs = make([]needMemo, len(f.mix))
	}
	c := &f.needs[m]
	if c.spg != spg {
		c.need, c.k = f.mix[m].need(spg)
		c.spg = spg
	}
	return c.need, c.k
}

func (f *fgd) reset(nodes int) {
	if len(f.cache) != nodes {
		f.cache = make([]fgdSummary, nodes)
	}
}

// change is one GPU's free shares before and after a hypothetical placement.
type change struct {
	gpu       int
	old, new_ int
}

// delta is F(n') - F(n) in shares for a placement that changes the listed
// GPUs and takes res from the node.
func (f *fgd) delta(n *Node, changes []change, res Resources) float64 {
	s := f.summary(n)
	free := n.Free()
	free.CPU -= res.CPU
	free.MemoryMiB -= res.MemoryMiB
	taken := 0
	for _, c := range changes {
		taken += c.old - c.new_
	}
	total := s.total - taken
	if len(n.groups) == 1 && n.mig == 0 {
		return f.deltaUniform(n, s, changes, free, total, taken)
	}
	return f.deltaGeneral(n, s, changes, free, total)
}

// instanceNeed is the per-GPU need of a typical request on g: need, but
// more than any GPU has for a whole-GPU kind on a shared MIG instance,
// which never holds one (its free shares are all too small for it).
func instanceNeed(g *GPU, need int) int {
	if need >= g.Shares && g.inst {
		return math.MaxInt32
	}
	return need
}

// deltaGeneral is delta for any node: per GPU model, shares-per-GPU and
// MIG instance.
func (f *fgd) deltaGeneral(n *Node, s *fgdSummary, changes []change, free Resources, total int) float64 {
	after := 0.0
	for m := range f.mix {
		t := &f.mix[m]
		e := s.per[m]
		for _, c := range changes {
			g := &n.GPUs[c.gpu]
			need, k := f.need(m, g.Shares)
			need = instanceNeed(g, need)
			if k == 0 || !t.eligible(g.Model) {
				e.nonElig -= int32(c.old - c.new_)
				continue
			}
			if c.old >= need {
				e.cnt--
			} else {
				e.small -= int32(c.old)
			}
			if c.new_ >= need {
				e.cnt++
			} else {
				e.small += int32(c.new_)
			}
		}
		after += t.Weight * float64(f.frag(m, e, total, free, n))
	}
	return after - s.frag
}

// mixRow is a typical request's needs on GPUs of one shares-per-GPU value.
type mixRow struct {
	need, k  int32
	cpu, mem int64
	weight   float64
	cpuOnly  bool
	anyModel bool
}

func (f *fgd) rowsFor(spg int) []mixRow {
	if f.rowsSPG == spg && len(f.rows) == len(f.mix) {
		return f.rows
	}
	f.rows = f.rows[:0]
	for m := range f.mix {
		t := &f.mix[m]
		need, k := t.need(spg)
		row := mixRow{need: int32(need), k: int32(k), cpu: t.CPU, weight: t.Weight, cpuOnly: t.Shares == 0, anyModel: len(t.Models) == 0}
		if f.memory {
			row.mem = t.MemoryMiB
		}
		f.rows = append(f.rows, row)
	}
	f.rowsSPG = spg
	return f.rows
}

// deltaUniform is delta for a node whose GPUs are all of one model and
// shares-per-GPU value, the common case, without per-GPU lookups.
func (f *fgd) deltaUniform(n *Node, s *fgdSummary, changes []change, free Resources, total, taken int) float64 {
	rows := f.rowsFor(n.GPUs[0].Shares)
	model := n.GPUs[0].Model
	after := 0.0
	for m := range rows {
		row := &rows[m]
		if row.cpuOnly {
			after += row.weight * float64(total)
			continue
		}
		e := s.per[m]
		if row.k == 0 || !(row.anyModel || f.mix[m].eligible(model)) {
			e.nonElig -= int32(taken)
		} else {
			for _, c := range changes {
				if int32(c.old) >= row.need {
					e.cnt--
				} else {
					e.small -= int32(c.old)
				}
				if int32(c.new_) >= row.need {
					e.cnt++
				} else {
					e.small += int32(c.new_)
				}
			}
		}
		if row.k > 0 && e.cnt >= row.k && free.CPU >= row.cpu && free.MemoryMiB >= row.mem {
			after += row.weight * float64(e.small+e.nonElig)
		} else {
			after += row.weight * float64(total)
		}
	}
	return after - s.frag
}

// frag is f(n, m): the free shares that typical request m could not use.
func (f *fgd) frag(m int, e fgdEntry, total int, free Resources, n *Node) int {
	t := &f.mix[m]
	if t.Shares == 0 {
		return total
	}
	k := 1
	if len(n.GPUs) > 0 {
		_, k = f.need(m, n.GPUs[0].Shares)
	}
	if k > 0 && int(e.cnt) >= k && free.CPU >= t.CPU && (!f.memory || free.MemoryMiB >= t.MemoryMiB) {
		return int(e.small + e.nonElig)
	}
	return total
}

// Fragmentation returns F(n) of every node summed, in GPUs, against the mix:
// the expected free capacity that typical requests could not use.
func Fragmentation(s *Snapshot, mix Mix) float64 {
	f := &fgd{mix: mix}
	f.reset(len(s.nodes))
	sum := 0.0
	for _, n := range s.nodes {
		sm := f.summary(n)
		for m := range mix {
			spg := 1
			if len(n.GPUs) > 0 {
				spg = n.GPUs[0].Shares
			}
			sum += mix[m].Weight * float64(f.frag(m, sm.per[m], sm.total, n.Free(), n)) / float64(spg)
		}
	}
	return sum
}
