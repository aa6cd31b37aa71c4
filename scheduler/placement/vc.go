package placement

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// VirtualCluster is a tenant's guaranteed capacity, in cells (HiveD): for
// example two 4-GPU cells of "Tesla V100-SXM2-16GB". Guaranteed
// (non-opportunistic) jobs of the tenant may use up to this capacity and get
// it back by preempting opportunistic jobs; opportunistic jobs of any tenant
// use whatever is idle. Jobs of tenants without a virtual cluster share the
// capacity no virtual cluster reserves.
type VirtualCluster struct {
	Name  string      `json:"name"`
	Cells []CellQuota `json:"cells"`
}

// CellQuota is Count cells of GPUs GPUs each of one model ("" = any model).
type CellQuota struct {
	Model string `json:"model,omitempty"`
	GPUs  int    `json:"gpus"`
	Count int    `json:"count"`
}

// Validate checks the virtual cluster.
func (v *VirtualCluster) Validate() error {
	if v.Name == "" {
		return fmt.Errorf("virtual cluster without a name")
	}
	for _, c := range v.Cells {
		if c.GPUs < 1 || c.Count < 0 {
			return fmt.Errorf("virtual cluster %q: cell %+v needs at least 1 GPU and a non-negative count", v.Name, c)
		}
	}
	return nil
}

// quota returns the guaranteed milli-GPUs per model.
func (v *VirtualCluster) quota() map[string]int {
	q := map[string]int{}
	for _, c := range v.Cells {
		q[c.Model] += c.GPUs * c.Count * 1000
	}
	return q
}

// spgOf returns the shares per GPU of the first GPU of a model.
func (s *Snapshot) spgOf(model string) int {
	for _, n := range s.nodes {
		for i := range n.GPUs {
			if n.GPUs[i].Model == model {
				return n.GPUs[i].Shares
			}
		}
	}
	return 0
}

func (s *Snapshot) models() []string {
	out := make([]string, 0, len(s.capacity))
	for m := range s.capacity {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// VCUsage returns the milli-GPUs that guaranteed jobs of a virtual cluster
// use, per model.
func (s *Snapshot) VCUsage(vc string) map[string]int {
	out := map[string]int{}
	for m, v := range s.vcUse[vc] {
		if v != 0 {
			out[m] = v
		}
	}
	return out
}

// remaining returns the guaranteed milli-GPUs of model left to the request's
// tenant.
func (e *engine) remaining(s *Snapshot, vc, model string) int {
	if v, ok := e.vcs[vc]; ok {
		q := v.quota()
		if lim, ok := q[model]; ok {
			return lim - s.vcUse[vc][model]
		}
		used := 0
		for m, u := range s.vcUse[vc] {
			if _, listed := q[m]; !listed {
				used += u
			}
		}
		return q[""] - used
	}
	// The shared pool: what no virtual cluster reserves.
	left := s.capacity[model]
	for _, v := range e.opts.VCs {
		q := v.quota()
		left -= q[model]
		if model != "" {
			left -= q[""] // an any-model guarantee may land on this model
		}
	}
	for name, use := range s.vcUse {
		if _, ok := e.vcs[name]; !ok {
			left -= use[model]
		}
	}
	return left
}

// gate applies the virtual cluster guarantee to a guaranteed request: it
// narrows the allowed models to those where the tenant has quota left, or
// refuses.
func (e *engine) gate(s *Snapshot, r *Request) *Refusal {
	if !r.guaranteed() || r.Shares == 0 || len(e.vcs) == 0 {
		return nil
	}
	var ok []string
	var report []string
	for _, m := range s.models() {
		if !r.modelOK(m) {
			continue
		}
		spg := s.spgOf(m)
		need := r.Shares * 1000 / max(spg, 1) * r.Count
		if frac, _, _ := shareSize(r.Shares, spg); frac > 0 && e.rounds() {
			need = 1000 * r.Count
		}
		left := e.remaining(s, r.VC, m)
		if left >= need {
			ok = append(ok, m)
		} else {
			report = append(report, fmt.Sprintf("%s: needs %.2f GPUs, %.2f left", m, float64(need)/1000, float64(max(left, 0))/1000))
		}
	}
	if len(ok) == 0 {
		who := "the shared pool (jobs without a virtual cluster)"
		if _, has := e.vcs[r.VC]; has {
			who = fmt.Sprintf("virtual cluster %q", r.VC)
		}
		return &Refusal{Code: RefusedQuota, Message: fmt.Sprintf("the guaranteed capacity of %s is in use (%s); wait for its jobs to finish or set gpushare.class = %q to use idle capacity",
			who, strings.Join(report, "; "), ClassOpportunistic)}
	}
	if len(ok) < len(s.capacity) || len(r.Models) > 0 {
		r.Models = slices.Clone(ok)
	}
	return nil
}
