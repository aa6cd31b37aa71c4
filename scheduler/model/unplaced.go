package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// Unplaced is what Nomad said when it evaluated one version of a job and
// could not place a group: the job modify index of that version and
// Nomad's own account of why (its allocation metric).
type Unplaced struct {
	JobModifyIndex uint64
	Reason         string
	// Metric is Nomad's account of the failed placement.
	Metric *api.AllocationMetric
}

// verdicts is what the state keeps of Nomad's evaluations: for each
// group Nomad could not place, what it said at the latest version it
// evaluated (Unplaced), until an evaluation of a later version places it
// or the job is gone. It is the state's: written under the service's
// cluster.mu (PutEval, the forgetting of jobs), read by NomadFailed and
// Snapshot under it or while no one writes (a pass's read).
type verdicts struct {
	unplaced map[decide.Key]Unplaced
}

// PutEval records what an evaluation of a job says about its groups: a
// group Nomad failed to place at that version, or groups it placed (their
// earlier failures are forgotten).
func (s *State) PutEval(e *api.Evaluation) {
	if e == nil || e.JobID == "" {
		return
	}
	s.changed.job(JobKey(e.Namespace, e.JobID)) // whether its pins hold shares (NomadFailed)
	s.verdicts.put(e)
}

// put records what evaluation e says of its job's groups (PutEval).
func (v *verdicts) put(e *api.Evaluation) {
	for _, g := range slices.Sorted(maps.Keys(e.FailedTGAllocs)) {
		if v.unplaced == nil {
			v.unplaced = map[decide.Key]Unplaced{}
		}
		k := decide.Key{Namespace: orDefault(e.Namespace), Job: e.JobID, Group: g}
		if prev, ok := v.unplaced[k]; ok && prev.JobModifyIndex > e.JobModifyIndex {
			continue
		}
		v.unplaced[k] = Unplaced{JobModifyIndex: e.JobModifyIndex, Reason: MetricReason(e.FailedTGAllocs[g]), Metric: e.FailedTGAllocs[g]}
	}
	if e.Status != api.EvalStatusComplete {
		return
	}
	for k, u := range v.unplaced {
		if k.Namespace == orDefault(e.Namespace) && k.Job == e.JobID && u.JobModifyIndex < e.JobModifyIndex {
			if _, failed := e.FailedTGAllocs[k.Group]; !failed {
				delete(v.unplaced, k)
			}
		}
	}
}

// forget drops what Nomad said of a job's groups (it is gone).
func (v *verdicts) forget(namespace, job string) {
	for k := range v.unplaced {
		if k.Namespace == orDefault(namespace) && k.Job == job {
			delete(v.unplaced, k)
		}
	}
}

// NomadFailed says why Nomad could not place the group at the job's
// current version, if it evaluated that version and a pinned node could
// not take it for a rule of the job (a pinned node filtered), or none was
// eligible at all (a datacenter or node pool the pin's nodes are not in).
// A pin that failed only because its nodes were exhausted — its shares,
// CPU or memory still held by an allocation being stopped or replaced — is
// no failure: Nomad's blocked evaluation places it once they free, and its
// shares stay held for it meanwhile. Exhausted ports, disk or cores are a
// failure: the scheduler does not model them.
func (s *State) NomadFailed(job *api.Job, group string) (string, bool) {
	u, ok := s.verdicts.unplaced[KeyOf(job, group)]
	if !ok || job.JobModifyIndex == nil || u.JobModifyIndex != *job.JobModifyIndex {
		return "", false
	}
	mine := ""  // the pin's node constraint, as Nomad's metric names it
	pinned := 0 // the pinned nodes Nomad can place on
	full := 0   // the pinned nodes at the pin's limit of allocations per node
	if rec, ok := s.Record(job, group); ok {
		mine = fmt.Sprintf("%s %s %s", pin.NodeAttribute, pin.OpSetContains, strings.Join(rec.Nodes, ","))
		if rec.PerNode > 0 {
			full = atLimit(u.Metric)
		}
		for _, n := range rec.Nodes {
			if node, ok := s.Nodes[n]; ok && Usable(node) {
				pinned++
			}
		}
	}
	m := u.Metric
	// A pinned node at the pin's own limit per node (pin.PerNodeConstraint)
	// holds every allocation the pin was decided for: what Nomad could not
	// place there is beyond the pin (a scale), for the scheduler to decide,
	// keeping what runs there, never a node Nomad refused.
	if full > 0 && m.NodesFiltered-m.ConstraintFiltered[mine]-full <= 0 && (m.NodesExhausted == 0 || modelled(m.DimensionExhausted)) {
		return "", false
	}
	if m == nil || m.NodesExhausted == 0 || !modelled(m.DimensionExhausted) {
		return u.Reason, true
	}
	// Nomad counts a node under the first rule it fails: on a mixed
	// cluster, nodes without the job's driver or failing its constraints
	// are counted under those rules, not the pin's. They are not pinned
	// nodes; what tells is whether every pinned node was found exhausted.
	if m.NodesFiltered-m.ConstraintFiltered[mine] <= 0 || (pinned > 0 && m.NodesExhausted+full >= pinned) {
		return "", false
	}
	return u.Reason, true
}

// atLimit counts the nodes Nomad filtered for a distinct_property limit on
// ${node.unique.id} (its reason names each node: "distinct_property:
// ${node.unique.id}=<node> used by <n> allocs").
func atLimit(m *api.AllocationMetric) int {
	if m == nil {
		return 0
	}
	n := 0
	for reason, count := range m.ConstraintFiltered {
		if strings.HasPrefix(reason, "distinct_property: "+pin.NodeAttribute+"=") {
			n += count
		}
	}
	return n
}

// modelled reports whether every dimension Nomad found exhausted is one
// the scheduler models and holds for a pin — GPU shares (devices), CPU,
// memory — so that it frees with the allocations being stopped or
// replaced. A port collision, a disk or a core exhausted is not: such a
// pin is decided again elsewhere rather than held.
func modelled(dims map[string]int) bool {
	for d := range dims {
		if !strings.HasPrefix(d, "devices") && d != "cpu" && d != "memory" {
			return false
		}
	}
	return true
}

// MetricReason puts Nomad's allocation metric of a failed placement into
// words, as `nomad job status` does: how many nodes it evaluated, and what
// filtered or exhausted them.
func MetricReason(m *api.AllocationMetric) string {
	if m == nil {
		return "Nomad could not place it"
	}
	parts := []string{fmt.Sprintf("Nomad could not place it: %d node(s) evaluated", m.NodesEvaluated)}
	tally := func(what string, counts map[string]int) {
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%s %s: %d", what, k, counts[k]))
		}
	}
	if m.NodesFiltered > 0 {
		parts = append(parts, fmt.Sprintf("%d filtered", m.NodesFiltered))
	}
	tally("class", m.ClassFiltered)
	tally("constraint", m.ConstraintFiltered)
	if m.NodesExhausted > 0 {
		parts = append(parts, fmt.Sprintf("%d exhausted", m.NodesExhausted))
	}
	tally("exhausted", m.DimensionExhausted)
	if len(m.QuotaExhausted) > 0 {
		parts = append(parts, "quota exhausted: "+strings.Join(m.QuotaExhausted, ", "))
	}
	return strings.Join(parts, "; ")
}
