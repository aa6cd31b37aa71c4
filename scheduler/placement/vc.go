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

// guarantee returns the tenant's whole guarantee of model in milli-GPUs
// (what it could use of an empty cluster) and how much of it its
// guaranteed jobs use: a virtual cluster's cells, or for jobs of no
// virtual cluster the shared pool (what no virtual cluster reserves).
func (e *engine) guarantee(s *Snapshot, vc, model string) (whole, used int) {
	if v, ok := e.vcs[vc]; ok {
		q := v.quota()
		if lim, ok := q[model]; ok {
			return lim, s.vcUse[vc][model]
		}
		for m, u := range s.vcUse[vc] {
			if _, listed := q[m]; !listed {
				used += u
			}
		}
		return q[""], used
	}
	whole = s.capacity[model]
	for _, v := range e.opts.VCs {
		q := v.quota()
		whole -= q[model]
		if model != "" {
			whole -= q[""] // an any-model guarantee may land on this model
		}
	}
	for name, use := range s.vcUse {
		if _, ok := e.vcs[name]; !ok {
			used += use[model]
		}
	}
	return whole, used
}

// tenant names whose guarantee a request draws on.
func (e *engine) tenant(vc string) string {
	if _, has := e.vcs[vc]; has {
		return fmt.Sprintf("virtual cluster %q", vc)
	}
	return "the shared pool (jobs without a virtual cluster)"
}

// gate applies the virtual cluster guarantee to a guaranteed request: it
// narrows the allowed models to those where the tenant has quota left.
// With none left on any, the request waits for its quota to free
// (RefusedQuota, naming the tenant, its guarantee and its use), unless no
// allowed model's whole guarantee could ever hold it, even unused on an
// empty cluster (RefusedOverQuota: refused for good). When it narrowed the
// models and a model left out would hold the request once its quota frees,
// short says so, for Decide to report a refusal on the narrowed models as
// that wait rather than as never.
func (e *engine) gate(s *Snapshot, r *Request) (ref, short *Refusal) {
	if !r.guaranteed() || r.Shares == 0 || len(e.vcs) == 0 {
		return nil, nil
	}
	var ok, report, over []string
	for _, m := range s.models() {
		if !r.modelOK(m) {
			continue
		}
		spg := s.spgOf(m)
		need := r.Shares * 1000 / max(spg, 1) * r.Count
		if frac, _, _ := shareSize(r.Shares, spg); frac > 0 && e.rounds() {
			need = 1000 * r.Count
		}
		whole, used := e.guarantee(s, r.VC, m)
		switch {
		case whole-used >= need:
			ok = append(ok, m)
		case whole >= need && fitsModel(s, *r, m):
			report = append(report, fmt.Sprintf("%s: needs %s, uses %s of its %s", m, gpus(need), gpus(used), gpus(whole)))
		default:
			over = append(over, fmt.Sprintf("%s: needs %s, guarantees %s", m, gpus(need), gpus(max(whole, 0))))
		}
	}
	if len(ok)+len(report)+len(over) == 0 {
		return nil, nil // no node has an allowed model: explain says so
	}
	who := e.tenant(r.VC)
	if len(report) > 0 {
		short = &Refusal{Code: RefusedQuota, Message: fmt.Sprintf("the guaranteed capacity of %s is in use (%s); it waits until enough of it frees, or set gpushare.class = %q to use idle capacity",
			who, strings.Join(report, "; "), ClassOpportunistic)}
	}
	if len(ok) == 0 {
		if short != nil {
			return short, nil
		}
		return &Refusal{Code: RefusedOverQuota, Message: fmt.Sprintf("larger than the guarantee of %s even unused (%s): ask for less, or set gpushare.class = %q to use idle capacity",
			who, strings.Join(over, "; "), ClassOpportunistic)}, nil
	}
	if len(ok) < len(s.capacity) || len(r.Models) > 0 {
		r.Models = slices.Clone(ok)
	}
	return nil, short
}

// fitsModel reports whether r could ever be placed on GPUs of model m
// alone (Impossible on an empty cluster of the snapshot's nodes).
func fitsModel(s *Snapshot, r Request, m string) bool {
	r.Models, r.Avoid = []string{m}, nil
	return Impossible(s, r) == nil
}

func gpus(milli int) string { return fmt.Sprintf("%.2f GPUs", float64(milli)/1000) }
