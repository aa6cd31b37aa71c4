package openb

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// MigrationBudget is the share of a workload's pods that the migration
// experiment may move (1%). Migrations are not part of the FGD method:
// their results are reported apart from it.
const MigrationBudget = 0.01

// migrator moves one running fractional pod to make room for a pod the
// policy refused, while its budget lasts.
type migrator struct {
	left int
	// scans caps the searches for a victim (successful or not), so that a
	// budget that cannot be spent does not make every refusal scan the
	// cluster.
	scans int
	pods  map[string]Pod // running pods by allocation ID
}

func newMigrator(budget int) *migrator {
	return &migrator{left: budget, scans: 3 * budget, pods: map[string]Pod{}}
}

// placed records the pods of an applied decision.
func (m *migrator) placed(d *placement.Decision, p Pod) {
	for _, pl := range d.Placements {
		m.pods[pl.AllocID] = p
	}
}

// victim is a running fractional pod whose removal would let the refused
// pod's GPUs, CPU and memory fit on its node.
type victim struct {
	alloc  placement.Alloc
	shares int
}

// candidates lists the victims on every node, fewest shares first, ties in
// node order.
func (m *migrator) candidates(s *placement.Snapshot, p Pod) []victim {
	req := Request(p)
	// A victim must fit somewhere else after the move: on another GPU with
	// as many free shares, on a node with its CPU and memory free.
	type room struct {
		gpu      string
		shares   int
		cpu, mem int64
	}
	var rooms []room
	for _, n := range s.Nodes() {
		free := n.Free()
		for i := range n.GPUs {
			if g := &n.GPUs[i]; !g.Down && g.Free() > 0 {
				rooms = append(rooms, room{g.UUID, g.Free(), free.CPU, free.MemoryMiB})
			}
		}
	}
	movable := func(a placement.Alloc, gpu string) bool {
		for _, r := range rooms {
			if r.gpu != gpu && r.shares >= len(a.Shares) && r.cpu >= a.Res.CPU && r.mem >= a.Res.MemoryMiB {
				return true
			}
		}
		return false
	}
	var out []victim
	for _, n := range s.Nodes() {
		if len(n.GPUs) == 0 || (len(p.Spec) > 0 && !slices.Contains(p.Spec, n.GPUs[0].Model)) {
			continue
		}
		spg := n.GPUs[0].Shares
		free := n.Free()
		whole := 0
		for i := range n.GPUs {
			if n.GPUs[i].Whole() && !n.GPUs[i].Down {
				whole++
			}
		}
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if g.Down || g.Whole() {
				continue
			}
			ids := s.OnGPU(g.UUID)
			for _, id := range ids {
				a, ok := s.Alloc(id)
				if !ok || len(a.Shares) >= spg || free.CPU+a.Res.CPU < p.CPU || free.MemoryMiB+a.Res.MemoryMiB < p.MemoryMiB {
					continue // only fractional pods move
				}
				fits := false
				if req.Shares < spg {
					fits = g.Free()+len(a.Shares) >= req.Shares
				} else {
					fits = len(ids) == 1 && whole+1 >= req.Shares/spg
				}
				if fits && movable(a, g.UUID) {
					out = append(out, victim{a, len(a.Shares)})
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b victim) int { return cmp.Compare(a.shares, b.shares) })
	return out
}

// try makes room for the refused pod p by moving one victim: the victim is
// stopped, p is placed by the policy, and the victim is placed again by the
// policy anywhere; if either fails the snapshot is restored. It returns
// p's decision (applied) and the nodes the victim left and went to, or ok
// false.
func (m *migrator) try(s *placement.Snapshot, pol placement.Policy, p Pod) (dp *placement.Decision, moved []string, ok bool) {
	if m.left <= 0 || m.scans <= 0 || p.TotalMilli() == 0 {
		return nil, nil, false
	}
	m.scans--
	cands := m.candidates(s, p)
	for _, v := range cands[:min(len(cands), 3)] {
		vp, known := m.pods[v.alloc.ID]
		if !known {
			continue
		}
		if _, err := s.Remove(v.alloc.ID); err != nil {
			continue
		}
		dp = pol.Decide(s, Request(p))
		if dp.Placed() && s.Apply(dp) == nil {
			dv := pol.Decide(s, Request(vp))
			if dv.Placed() && s.Apply(dv) == nil {
				delete(m.pods, v.alloc.ID)
				m.placed(dp, p)
				m.placed(dv, vp)
				m.left--
				return dp, []string{v.alloc.Node, dv.Placements[0].Node}, true
			}
			for _, pl := range dp.Placements {
				_, _ = s.Remove(pl.AllocID)
			}
		}
		_ = s.AddAlloc(v.alloc)
	}
	return nil, nil, false
}

// Migration compares gpushare with and without a budget of migrations on
// one trace at 130% arrived demand, over the seeds both ran.
type Migration struct {
	Trace string `json:"trace"`
	Seeds int    `json:"seeds"`
	// Gpushare is the FGD method's allocation ratio (%), Migrated the same
	// pods with migrations; Migrations the mean of pods moved per seed.
	Gpushare   report.Num `json:"gpushare"`
	Migrated   report.Num `json:"with_migrations"`
	Migrations report.Num `json:"migrations"`
	// Budget is the mean number of moves allowed per seed.
	Budget report.Num `json:"budget"`
}

// MigrationSummaries pairs every migrated replay with gpushare's on the
// same trace and seed.
func (r *Report) MigrationSummaries() []Migration {
	plain := map[string]*Result{}
	for _, res := range r.Results {
		if res.Policy == placement.PolicyGpushare {
			plain[limitKey(res.Trace, res.Seed, 0)] = res
		}
	}
	var out []Migration
	index := map[string]int{}
	for _, m := range r.Migrated {
		g, ok := plain[limitKey(m.Trace, m.Seed, 0)]
		if !ok {
			continue
		}
		i, ok := index[m.Trace]
		if !ok {
			i = len(out)
			index[m.Trace] = i
			out = append(out, Migration{Trace: m.Trace})
		}
		o := &out[i]
		o.Seeds++
		o.Gpushare += report.Num(g.Alloc[MaxDemand])
		o.Migrated += report.Num(m.Alloc[MaxDemand])
		o.Migrations += report.Num(m.Migrations)
		o.Budget += report.Num(int(MigrationBudget * float64(m.Pods)))
	}
	for i := range out {
		n := report.Num(out[i].Seeds)
		out[i].Gpushare, out[i].Migrated, out[i].Migrations, out[i].Budget = out[i].Gpushare/n, out[i].Migrated/n, out[i].Migrations/n, out[i].Budget/n
	}
	return out
}

// MigrationTable shows what the budget of migrations buys gpushare.
func MigrationTable(ms []Migration) report.Table {
	t := report.Table{Header: []string{"trace", "seeds", "gpushare @130 (FGD method)", "with migrations @130", "gain (pp)", "pods moved", "budget"}}
	for _, m := range ms {
		t.Rows = append(t.Rows, []string{m.Trace, strconv.Itoa(m.Seeds), report.F(m.Gpushare), report.F(m.Migrated),
			fmt.Sprintf("%+.2f", m.Migrated-m.Gpushare), report.F1(m.Migrations), report.F1(m.Budget)})
	}
	return t
}

// MigrationIntro explains the migration experiment in openb.md.
const MigrationIntro = "Not the FGD method: the same replay, but when gpushare refuses a GPU pod, one running fractional pod whose removal would make room " +
	"(its GPU share, CPU and memory) and that fits elsewhere may be moved — the refused pod is placed by the policy, then the moved pod anywhere by the policy, " +
	"else both are undone — up to 1% of the workload's pods per replay (victims tried: the three smallest per refusal, for at most three times the budget of refusals)."
