package gavel

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	simrun "github.com/gpushare/gpushare/scheduler/sim"
	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// DefaultTraces are the MSR traces replayed by default: those with at least
// 500 jobs (the others hold 3 to 18 jobs).
var DefaultTraces = []string{"0e4a51", "103959", "11cb48", "2869ce", "6214e9", "6c71a0", "7f04ca", "b436b2", "e13805", "ed69ec", "ee9e8c"}

// Config selects what Run simulates.
type Config struct {
	Data Data
	// GPU is the GPU type whose measured throughputs the clusters run at
	// (Data.ThroughputsOf; "" is DefaultGPU). The interference model is
	// fitted on V100 pairs (interference.Default) whatever it is: another
	// type is one the model was never fitted on.
	GPU      string
	Traces   []string
	Clusters []Cluster
	Policies []string
	Options  Options
	Workers  int
	Progress func(line string)
	// Conditions are perturbed runs reported beside the exact one (see
	// StandardConditions); each runs again only the policies it affects.
	Conditions []Robustness
	// Elastic are elastic runs reported beside the exact one (one per
	// seed, say): each runs again only the gpushare policies.
	Elastic []Elastic
	// Timeslice, when on, runs exclusive again with time-slicing, reported
	// beside exclusive's queueing (timeslice.go).
	Timeslice Timeslice
}

// Report holds the metrics of every trace x cluster x policy, and of the
// perturbed conditions.
type Report struct {
	// GPU is the GPU type the clusters ran at.
	GPU        string
	Metrics    []Metrics
	Conditions []Condition
	Elastic    []ElasticRun
	// Timesliced are exclusive's runs with time-slicing under Timeslice
	// (Config.Timeslice).
	Timesliced []Metrics
	Timeslice  Timeslice
}

// Run simulates every combination, Workers at a time.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.GPU == "" {
		cfg.GPU = DefaultGPU
	}
	thr, err := cfg.Data.ThroughputsOf(cfg.GPU)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Policies {
		if _, err := specFor(p); err != nil {
			return nil, err
		}
	}
	traces := map[string][]Job{}
	for _, tr := range cfg.Traces {
		if traces[tr], err = cfg.Data.Trace(tr); err != nil {
			return nil, err
		}
	}
	type job struct {
		trace, policy string
		cluster       Cluster
		cond          int // -1: exact; else an index into cfg.Conditions
		el            int // -1: not elastic; else an index into cfg.Elastic
		ts            bool
	}
	var jobs []job
	for cond := -1; cond < len(cfg.Conditions); cond++ {
		for _, tr := range cfg.Traces {
			for _, c := range cfg.Clusters {
				for _, p := range cfg.Policies {
					if cond < 0 || affects(cfg.Conditions[cond], p) {
						jobs = append(jobs, job{tr, p, c, cond, -1, false})
					}
				}
			}
		}
	}
	for el := range cfg.Elastic {
		for _, tr := range cfg.Traces {
			for _, c := range cfg.Clusters {
				for _, p := range cfg.Policies {
					if specs[p].share == shareModel {
						jobs = append(jobs, job{tr, p, c, -1, el, false})
					}
				}
			}
		}
	}
	if cfg.Timeslice.On {
		if !slices.Contains(cfg.Policies, "exclusive") {
			return nil, fmt.Errorf("time-slicing is reported beside exclusive's queueing: run the policy exclusive")
		}
		if err := cfg.Timeslice.check("exclusive"); err != nil {
			return nil, err
		}
		for _, tr := range cfg.Traces {
			for _, c := range cfg.Clusters {
				jobs = append(jobs, job{tr, "exclusive", c, -1, -1, true})
			}
		}
	}
	out := make([]Metrics, len(jobs))
	err = simrun.Parallel(ctx, len(jobs), cfg.Workers, func(i int) error {
		j := jobs[i]
		opts := cfg.Options
		if j.cond >= 0 {
			opts.Robustness = cfg.Conditions[j.cond]
		}
		if j.el >= 0 {
			opts.Elastic = cfg.Elastic[j.el]
		}
		if j.ts {
			opts.Timeslice = cfg.Timeslice
		}
		res, util, err := Simulate(j.policy, traces[j.trace], j.cluster, thr, opts)
		if err != nil {
			return fmt.Errorf("%s on %s with %s: %w", j.trace, j.cluster.Name, j.policy, err)
		}
		out[i] = Summarise(j.trace, j.cluster.Name, j.policy, res, util)
		return nil
	}, func(i, done int) {
		if cfg.Progress != nil {
			j, m := jobs[i], out[i]
			cond := ""
			if j.cond >= 0 {
				cond = " [" + cfg.Conditions[j.cond].Name + "]"
			}
			if j.el >= 0 {
				cond = fmt.Sprintf(" [elastic, seed %d]", cfg.Elastic[j.el].Seed)
			}
			if j.ts {
				cond = " [time-sliced]"
			}
			cfg.Progress(fmt.Sprintf("gavel %d/%d: %s %s %s%s: avg JCT %.1f h, p99 %.1f h", done, len(jobs), j.trace, j.cluster.Name, j.policy, cond, m.AvgJCT, m.P99JCT))
		}
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{GPU: cfg.GPU, Timeslice: cfg.Timeslice}
	conds := make([][]Metrics, len(cfg.Conditions))
	for _, e := range cfg.Elastic {
		rep.Elastic = append(rep.Elastic, ElasticRun{Elastic: e})
	}
	for i, j := range jobs {
		switch {
		case j.ts:
			rep.Timesliced = append(rep.Timesliced, out[i])
		case j.el >= 0:
			rep.Elastic[j.el].Metrics = append(rep.Elastic[j.el].Metrics, out[i])
		case j.cond < 0:
			rep.Metrics = append(rep.Metrics, out[i])
		default:
			conds[j.cond] = append(conds[j.cond], out[i])
		}
	}
	for i, ms := range conds {
		rep.Conditions = append(rep.Conditions, Condition{Robustness: cfg.Conditions[i], Metrics: ms, Goals: conditionGoals(rep.Metrics, ms)})
	}
	return rep, nil
}

const modelNotes = `Model: a single-GPU job that shares holds half of its GPU, so at most two
jobs share one; they run at Gavel's measured co-located throughputs, and pairs
Gavel measured as unable to share (0) never do. Multi-GPU jobs hold whole GPUs
at the throughput measured for their scale factor (jobs larger than a server
take whole servers and run at the unconsolidated throughput; unmeasured scale
factors scale the largest measured one linearly). FIFO serves the queue in
arrival order, starting every job that fits (a job that does not fit does not
hold back later ones); SJF orders it by isolated run time, known in advance;
gpushare by response ratio, (waited + expected run time) / expected run time,
with the same run times, and lets a multi-GPU job that cannot start hold
servers (later jobs use them only if they end before it could start).
gpushare predicts pairs with its interference model (fitted on these
measurements, cross-validated RMSE 0.19: the uncertainty of a pair on a GPU
model nothing was observed on), gives every job a slowdown bound of 0.6,
observes each pair 10 minutes after it forms, learns from it the model's
error on that GPU model (its mean shifts the predictions of the pairs not
observed there yet, its spread is their uncertainty), and unpairs a pair where a job runs slower than
its bound or that is slower, summed over both jobs, than one after the
other: the newer job of the pair goes back to the queue and loses its work
since it last started (no checkpoints). Times are in hours; utilisation
counts GPUs with at least one job.
`

// Table lists the metrics.
func (r *Report) Table() report.Table {
	t := report.Table{Header: []string{"trace", "cluster", "policy", "jobs", "avg JCT (h)", "p99 JCT (h)", "avg queueing (h)", "makespan (h)", "avg GPU util %", "jobs that shared"}}
	for _, m := range r.Metrics {
		t.Rows = append(t.Rows, []string{m.Trace, m.Cluster, m.Policy, strconv.Itoa(m.Jobs - m.Unplaced), report.F1(m.AvgJCT), report.F1(m.P99JCT),
			report.F1(m.AvgQueue), report.F1(m.Makespan), report.F1(m.Util), strconv.Itoa(m.Shared)})
	}
	return t
}

// WriteDir writes gavel_metrics.csv, gavel_goals.csv (when gpushare ran
// with other policies), gavel.md, a chart per cluster of average JCT
// relative to exclusive and one JCT CDF plot per trace and cluster
// (format "svg" or "png"), and gavel_elastic.csv with elastic runs.
func (r *Report) WriteDir(dir, format string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t := r.Table()
	if err := t.WriteCSV(filepath.Join(dir, "gavel_metrics.csv")); err != nil {
		return err
	}
	goals := GoalsTable(r.Goals())
	if len(goals.Rows) > 1 {
		if err := goals.WriteCSV(filepath.Join(dir, "gavel_goals.csv")); err != nil {
			return err
		}
	}
	chart := "gavel_robustness." + format
	if len(r.Conditions) > 0 {
		if err := r.RobustnessTable().WriteCSV(filepath.Join(dir, "gavel_robustness.csv")); err != nil {
			return err
		}
		if err := r.robustnessBars().Save(filepath.Join(dir, chart)); err != nil {
			return err
		}
	}
	var md strings.Builder
	md.WriteString("# Gavel MSR traces: job completion time\n\n")
	fmt.Fprintf(&md, "Measured %s throughputs alone and co-located (Gavel, OSDI'20)%s. Policies:\n\n", gpuName(r.GPU), modelFittedOn(r.GPU))
	for _, p := range Policies {
		fmt.Fprintf(&md, "- `%s`: %s\n", p, PolicyInfo[p])
	}
	md.WriteString("\n" + modelNotes + "\n")
	if len(goals.Rows) > 1 {
		md.WriteString("## gpushare's goal\n\nThe lowest average JCT of the baselines run (exclusive, hived, packing, sjf-bsbf; not gpushare's own ablations), and a p99 JCT no worse than exclusive's, compared at full precision:\n\n" + goals.Markdown() + "\n## All policies\n\n")
	}
	md.WriteString(t.Markdown())
	md.WriteString(r.robustnessMarkdown(chart))
	if len(r.Elastic) > 0 {
		if err := r.ElasticRunsTable().WriteCSV(filepath.Join(dir, "gavel_elastic.csv")); err != nil {
			return err
		}
		md.WriteString(r.elasticMarkdown())
	}
	if len(r.Timesliced) > 0 {
		if err := r.TimesliceTable().WriteCSV(filepath.Join(dir, "gavel_timeslice.csv")); err != nil {
			return err
		}
		md.WriteString(r.timesliceMarkdown())
	}
	if bars := r.relativeBars(); len(bars) > 0 {
		md.WriteString("\n## Average JCT relative to exclusive\n\n")
		for _, cb := range bars {
			name := fmt.Sprintf("gavel_avg_jct_%s.%s", fileSafe(cb.cluster), format)
			if err := cb.bars.Save(filepath.Join(dir, name)); err != nil {
				return err
			}
			fmt.Fprintf(&md, "![%s](%s)\n\n", cb.bars.Title, name)
		}
	}
	md.WriteString("\n## JCT CDFs\n\n")
	for _, ms := range r.byRun() {
		k := ms[0]
		p := report.Plot{Title: fmt.Sprintf("Gavel %s on %s: JCT CDF", k.Trace, k.Cluster), XLabel: "job completion time (h, log scale)", YLabel: "fraction of jobs", LogX: true, YMin: 0, YMax: 1}
		for _, m := range ms {
			y := make([]float64, len(m.JCTs))
			for i := range y {
				y[i] = float64(i+1) / float64(len(y))
			}
			p.Series = append(p.Series, report.Series{Name: m.Policy, X: m.JCTs, Y: y, Dashed: m.Policy == "gpushare-fifo"})
		}
		name := fmt.Sprintf("gavel_jct_cdf_%s_%s.%s", k.Trace, fileSafe(k.Cluster), format)
		if err := p.Save(filepath.Join(dir, name)); err != nil {
			return err
		}
		fmt.Fprintf(&md, "![%s %s](%s)\n\n", k.Trace, k.Cluster, name)
	}
	return os.WriteFile(filepath.Join(dir, "gavel.md"), []byte(md.String()), 0o644)
}

// byRun groups the metrics by trace and cluster, in report order.
func (r *Report) byRun() [][]Metrics {
	type key struct{ trace, cluster string }
	return groupBy(r.Metrics, func(m Metrics) key { return key{m.Trace, m.Cluster} })
}

// groupBy groups vs by key, groups and their members in order of first
// appearance.
func groupBy[V any, K comparable](vs []V, key func(V) K) [][]V {
	at := map[K]int{}
	var out [][]V
	for _, v := range vs {
		k := key(v)
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], v)
	}
	return out
}
