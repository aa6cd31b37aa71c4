package gavel

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// TimesliceTable compares exclusive's FIFO queueing with the same policy
// time-slicing single-GPU jobs that would wait, per trace and cluster.
func (r *Report) TimesliceTable() report.Table {
	t := report.Table{Header: []string{"trace", "cluster", "jobs", "avg JCT (h)", "time-sliced avg JCT (h)", "p99 JCT (h)", "time-sliced p99 (h)",
		"makespan (h)", "time-sliced makespan (h)", "GPU util %", "time-sliced util %", "jobs time-sliced"}}
	type key struct{ trace, cluster string }
	queued := map[key]Metrics{}
	for _, m := range r.Metrics {
		if m.Policy == "exclusive" {
			queued[key{m.Trace, m.Cluster}] = m
		}
	}
	for _, ts := range r.Timesliced {
		q, ok := queued[key{ts.Trace, ts.Cluster}]
		if !ok {
			continue
		}
		t.Rows = append(t.Rows, []string{ts.Trace, ts.Cluster, strconv.Itoa(ts.Jobs - ts.Unplaced), report.F1(q.AvgJCT), report.F1(ts.AvgJCT),
			report.F1(q.P99JCT), report.F1(ts.P99JCT), report.F1(q.Makespan), report.F1(ts.Makespan), report.F1(q.Util), report.F1(ts.Util), strconv.Itoa(ts.Shared)})
	}
	return t
}

// TimesliceNotes describe time-slicing runs under ts.
func TimesliceNotes(ts Timeslice) string {
	return fmt.Sprintf("exclusive (FIFO, a GPU per single-GPU job) against the same policy where a single-GPU job that would wait "+
		"is time-sliced instead: placed by the placement core as a time-sliced request for its GPU memory's shares (gpushare's per-type "+
		"estimate, out of the GPU's memory: 16 GB on a V100 or P100, 12 GB on a K80; never beside a job Gavel measured unable to share a GPU with it), at most %d per GPU, "+
		"each running at its isolated throughput for 1/n of the time less a %.3g s switch per %.3g s quantum; %s. Multi-GPU jobs hold whole GPUs "+
		"in both. Utilisation counts GPUs with at least one job; jobs time-sliced are those that took turns with another at some point.",
		ts.maxPerGPU(), ts.switchCost(), ts.quantum(), greedyNote(ts.Greedy))
}

func (r *Report) timesliceMarkdown() string {
	var b strings.Builder
	b.WriteString("\n## Time-slicing\n\n")
	b.WriteString(TimesliceNotes(r.Timeslice) + "\n\n")
	b.WriteString(r.TimesliceTable().Markdown() + "\n")
	return b.String()
}

func greedyNote(greedy bool) string {
	if greedy {
		return "greedy: a job is time-sliced even while a multi-GPU job waits ahead of it"
	}
	return "while a multi-GPU job waits ahead of it in the queue a job takes only an idle GPU, so that GPUs free whole"
}
