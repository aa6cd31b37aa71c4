package gavel

import (
	"math"
	"slices"
)

// Metrics summarise one simulation (times in hours).
type Metrics struct {
	Trace    string  `json:"trace"`
	Cluster  string  `json:"cluster"`
	Policy   string  `json:"policy"`
	Jobs     int     `json:"jobs"`
	Unplaced int     `json:"unplaced"`
	AvgJCT   float64 `json:"avg_jct_h"`
	P99JCT   float64 `json:"p99_jct_h"`
	AvgQueue float64 `json:"avg_queueing_h"`
	Makespan float64 `json:"makespan_h"`
	// Util is the time-averaged share of GPUs with at least one job (%).
	Util float64 `json:"avg_gpu_util"`
	// Shared counts the jobs that shared a GPU at some point.
	Shared int `json:"shared_jobs"`
	// Moves counts introspection's unpairings (gpushare), and LostH the
	// work they cost the moved jobs (hours alone).
	Moves int     `json:"moves,omitempty"`
	LostH float64 `json:"lost_work_h,omitempty"`
	// ElasticJobs counts the jobs that opted in to elastic groups, Grows
	// and Shrinks the replicas they gained and gave back.
	ElasticJobs int `json:"elastic_jobs,omitempty"`
	Grows       int `json:"grows,omitempty"`
	Shrinks     int `json:"shrinks,omitempty"`
	// JCTs are the completion times of placed jobs, sorted (for CDFs).
	JCTs []float64 `json:"-"`
}

// Summarise computes the metrics of one simulation. The p99 is the
// nearest-rank 99th percentile.
func Summarise(trace, cluster, policy string, out []Outcome, util float64) Metrics {
	m := Metrics{Trace: trace, Cluster: cluster, Policy: policy, Jobs: len(out), Util: 100 * util}
	first := math.Inf(1)
	for _, o := range out {
		first = min(first, o.Job.Arrival)
		if !o.Placed {
			m.Unplaced++
			continue
		}
		m.JCTs = append(m.JCTs, o.JCT()/3600)
		m.AvgQueue += o.Queueing() / 3600
		m.Makespan = max(m.Makespan, o.Finish/3600)
		if o.SharedFor > 0 {
			m.Shared++
		}
		m.Moves += o.Moves
		m.LostH += o.Lost / 3600
		if o.Elastic {
			m.ElasticJobs++
		}
		m.Grows += o.Grows
		m.Shrinks += o.Shrinks
	}
	n := len(m.JCTs)
	if n == 0 {
		return m
	}
	slices.Sort(m.JCTs)
	for _, v := range m.JCTs {
		m.AvgJCT += v
	}
	m.AvgJCT /= float64(n)
	m.AvgQueue /= float64(n)
	m.P99JCT = Percentile(m.JCTs, 99)
	m.Makespan -= first / 3600
	return m
}

// Percentile returns the nearest-rank p-th percentile of sorted values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
