package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/sim/gavel"
	"github.com/gpushare/gpushare/scheduler/sim/openb"
)

const simUsage = `Usage: gpushare sim <trace set> [flags]

  openb   Alibaba openb traces with the FGD paper's method: GPU allocation ratio
          as arrived demand grows to 130%, validated against the published numbers
  gavel   Gavel MSR traces in time with measured co-location throughputs:
          job completion time, queueing delay, makespan, GPU utilisation
  gavel-throughputs
          convert throughputs measured in Gavel's form (its
          simulation_throughputs.json) of another GPU type into files for
          'gpushare sim gavel -data DIR -gpu TYPE'

Run 'gpushare sim openb -h' or 'gpushare sim gavel -h' for flags.
`

func runSim(args []string, io IO) int {
	if len(args) > 0 && args[0] == "gavel-throughputs" {
		return simGavelThroughputs(args[1:], io)
	}
	if len(args) == 0 || (args[0] != "openb" && args[0] != "gavel") {
		fmt.Fprint(io.Err, simUsage)
		if len(args) > 0 && isHelp(args[0]) {
			return 0
		}
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if args[0] == "openb" {
		return simOpenb(ctx, args[1:], io)
	}
	return simGavel(ctx, args[1:], io)
}

// simCommon are the flags both trace sets share.
type simCommon struct {
	traces, policies, data, out, format string
	workers                             int
	asJSON, quiet                       bool
}

func (c *simCommon) register(fs *flag.FlagSet, traces, policies string) {
	fs.StringVar(&c.traces, "traces", traces, "comma-separated traces")
	fs.StringVar(&c.policies, "policies", policies, "comma-separated policies, compared in one run")
	fs.StringVar(&c.data, "data", "", "read traces from this directory instead of the copies built into gpushare")
	fs.StringVar(&c.out, "out", "", "write CSV files, a markdown summary and plots into this directory")
	fs.StringVar(&c.format, "format", "svg", "plot format: svg or png")
	fs.IntVar(&c.workers, "workers", runtime.NumCPU(), "simulations run in parallel")
	fs.BoolVar(&c.asJSON, "json", false, "print a machine-readable result on stdout")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines on stderr")
}

func (c *simCommon) check() error {
	if c.format != "svg" && c.format != "png" {
		return fmt.Errorf("-format %q: want svg or png", c.format)
	}
	if c.workers < 1 {
		return fmt.Errorf("-workers %d: want at least 1", c.workers)
	}
	return nil
}

// emit writes the report's files when -out is set, then prints the result
// as JSON with -json, or as text.
func (c *simCommon) emit(io IO, writeDir func(dir, format string) error, asJSON any, text func()) int {
	if c.out != "" {
		if err := writeDir(c.out, c.format); err != nil {
			return simFail(io, err)
		}
	}
	if c.asJSON {
		enc := json.NewEncoder(io.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(asJSON); err != nil {
			return simFail(io, err)
		}
		return 0
	}
	text()
	return 0
}

func (c *simCommon) progress(io IO) func(string) {
	if c.quiet {
		return nil
	}
	return func(line string) { fmt.Fprintln(io.Err, line) }
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseSeeds reads "42-51" or "42,45,50".
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, f := range splitList(s) {
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: want a number or a range like 42-51", f)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 64); err != nil || b < a || b-a > 1000 {
				return nil, fmt.Errorf("seed range %q: want low-high with at most 1000 seeds", f)
			}
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no seeds given")
	}
	return out, nil
}

func simFail(io IO, err error) int {
	fmt.Fprintf(io.Err, "gpushare sim: %v\n", err)
	return 1
}

func simOpenb(ctx context.Context, args []string, io IO) int {
	fs := newFlags("sim openb", "sim openb [flags]", io)
	var c simCommon
	c.register(fs, strings.Join(openb.Traces, ","), strings.Join(openb.DefaultPolicies, ","))
	seeds := fs.String("seeds", "42-51", "seeds (the FGD paper uses 42-51)")
	limits := fs.Bool("limits", true, "also pack each seed's pods offline (largest first) and bound what any packer can allocate, at 100% and 130% arrived demand (adds about half to the CPU time)")
	migrations := fs.Bool("migrations", false, "also replay gpushare allowed to move running fractional pods (up to 1% of pods) to make room; not the FGD method, reported apart")
	coverage := fs.Float64("gpushare-mix-coverage", openb.DefaultGpushareCoverage, "gpushare's expected mix of requests covers this share of the trace's pods (FGD's typical pods: 0.95; compare with policy fgd-own-mix)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	sd, err := parseSeeds(*seeds)
	if err == nil {
		err = c.check()
	}
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare sim openb: %v\n", err)
		return exitUsage
	}
	data := openb.Embedded()
	if c.data != "" {
		data = openb.Dir(c.data)
	}
	rep, err := openb.Run(ctx, openb.Config{Data: data, Traces: splitList(c.traces), Policies: splitList(c.policies), Seeds: sd,
		GpushareCoverage: *coverage, Limits: *limits, Migrations: *migrations, Workers: c.workers, Progress: c.progress(io)})
	if err != nil {
		return simFail(io, err)
	}
	j := rep.JSON()
	return c.emit(io, rep.WriteDir, j, func() {
		fmt.Fprintf(io.Out, "Validation against the published FGD means (tolerance %.1f pp):\n\n%s\n", openb.Tolerance, openb.ValidationTable(j.Validation).Text())
		if len(j.VsFGD) > 0 {
			fmt.Fprintf(io.Out, "gpushare vs FGD at 130%% arrived demand:\n\n%s\n", openb.VsFGDTable(j.VsFGD).Text())
		}
		if len(j.Limits) > 0 {
			fmt.Fprintf(io.Out, "How close to the limit (offline packer, upper bound):\n\n%s\n", openb.LimitTable(j.Limits).Text())
		}
		if len(j.Migrations) > 0 {
			fmt.Fprintf(io.Out, "gpushare with a budget of migrations (not the FGD method):\n\n%s\n", openb.MigrationTable(j.Migrations).Text())
		}
		fmt.Fprintf(io.Out, "All policies:\n\n%s", openb.SummaryTable(j.Summaries).Text())
		if c.out != "" {
			fmt.Fprintf(io.Out, "\nwrote %s/openb.md, CSV files and plots\n", c.out)
		}
	})
}

func simGavel(ctx context.Context, args []string, io IO) int {
	fs := newFlags("sim gavel", "sim gavel [flags]", io)
	var c simCommon
	c.register(fs, strings.Join(gavel.DefaultTraces, ","), strings.Join(gavel.Policies, ","))
	clusters := fs.String("cluster", "pcie,dgx1", "clusters: pcie (16 servers x 4 GPUs on PCIe), dgx1 (8 DGX-1 servers x 8 GPUs); name:N sets the node count")
	gpu := fs.String("gpu", gavel.DefaultGPU, "the GPU type whose measured throughputs the clusters run at: v100, p100 or k80 (Gavel's; with -data, any type the directory has: 'gpushare sim gavel-throughputs' makes one from measurements in Gavel's form); gpushare's interference model is fitted on V100 pairs only, so p100 and k80 are GPU types it never saw")
	slowdown := fs.Float64("max-slowdown", gavel.DefaultMaxSlowdown, "gpushare: the largest predicted slowdown a pairing may cause a job")
	boundedCost := fs.Bool("bounded-cost", false, "gpushare: pair a job on the expected gain when it exceeds what the pairing costs if it is one uncertainty worse than predicted, bounded by introspection (one observation window), and check the production bound at the prediction; measured, not the default (docs/results)")
	stretch := fs.Float64("max-stretch", gavel.DefaultMaxStretch, "gpushare: what sharing may cost a job over its life, a share of its run time alone: its GPU is not shared once it lost that much (0: no bound)")
	var rb gavel.Robustness
	fs.Float64Var(&rb.Bias, "model-bias", 0, "robustness: add this to every predicted normalised throughput of a pair (+0.15: the model believes pairs 0.15 faster than they run)")
	fs.Float64Var(&rb.Noise, "model-noise", 0, "robustness: the standard deviation of an error added to each job's prediction with each partner")
	fs.Float64Var(&rb.RuntimeSigma, "runtime-sigma", 0, "robustness: declared run times are off by a log-normal factor exp(N(0, sigma))")
	fs.BoolVar(&rb.NoRuntimes, "no-runtimes", false, "robustness: no run time is declared (gpushare and sjf-bsbf see the default for every job)")
	seed := fs.Uint64("robustness-seed", 1, "robustness: seed of the model noise and the run-time errors (-model-noise, -runtime-sigma, and -robustness's conditions)")
	noIntro := fs.Bool("no-introspection", false, "gpushare: no observation of pairs, no unpairing, predictions without uncertainty (the ablation)")
	observe := fs.Duration("observe-after", gavel.DefaultObserveAfter*time.Second, "gpushare: how long a pair runs before its progress is seen")
	checkpoint := fs.Duration("checkpoint", 0, "how often jobs checkpoint: a job moved off its GPU loses its work since the last one (0: since it last started)")
	robust := fs.Bool("robustness", false, "also run gpushare (and sjf-bsbf where run times change) under the standard perturbed conditions: model bias +0.15 and -0.15, model noise 0.2, run times off by a log-normal factor (sigma 1), none declared; report the goals of each")
	heldOut := fs.Bool("held-out", false, "also run gpushare with its interference model fitted on part of the measured pairs only (either half, a quarter; of -gpu's type): GPU types the model was not fitted on; report the goals of each")
	unc := fs.Float64("uncertainty-scale", 1, "gpushare: scale of the uncertainty of an unobserved prediction (1: the model's cross-validated RMSE)")
	elShare := fs.Float64("elastic-share", 0, "elastic groups: also run the gpushare policies with this fraction of the jobs elastic (drawn per seed), each growing into idle GPUs one replica at a time up to -elastic-max times its GPUs and shrinking, newest replica first and never below its own GPUs, when a waiting job needs them; reported beside the run without (0: off)")
	elMax := fs.Int("elastic-max", gavel.DefaultElasticMax, "elastic groups: an elastic job runs on at most this many times the GPUs it asks for")
	elSeeds := fs.String("elastic-seeds", "1-3", "elastic groups: seeds of the draw of the jobs that opt in, one elastic run each")
	elCost := fs.Duration("elastic-resize-cost", gavel.DefaultResizeCost*time.Second, "elastic groups: the pause each grow or shrink costs a job")
	var ts gavel.Timeslice
	fs.BoolVar(&ts.On, "timeslice", false, "time-slicing: also run exclusive with single-GPU jobs that would wait time-sliced on a GPU whose memory fits, reported beside its queueing")
	quantum := fs.Duration("timeslice-quantum", time.Duration(gavel.DefaultQuantum*float64(time.Second)), "time-slicing: each job's turn on its GPU")
	switchCost := fs.Duration("timeslice-switch-cost", time.Duration(gavel.DefaultSwitchCost*float64(time.Second)), "time-slicing: the GPU time each switch of turns loses")
	fs.BoolVar(&ts.Greedy, "timeslice-greedy", false, "time-slicing: time-slice a job even while a multi-GPU job waits ahead of it (default: only an idle GPU then, so that GPUs free whole)")
	fs.IntVar(&ts.MaxPerGPU, "timeslice-max-per-gpu", gavel.DefaultMaxPerGPU, "time-slicing: the most time-sliced jobs on one GPU")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	err := c.check()
	var cl []gavel.Cluster
	for _, name := range splitList(*clusters) {
		if err != nil {
			break
		}
		var one gavel.Cluster
		one, err = gavel.ParseCluster(name)
		cl = append(cl, one)
	}
	if err == nil && !(*slowdown > 0 && *slowdown < 1) {
		err = fmt.Errorf("-max-slowdown %v: want a value within (0, 1)", *slowdown)
	}
	if err == nil && !(*stretch >= 0 && *stretch <= 10) {
		err = fmt.Errorf("-max-stretch %v: want a share of a job's run time within 0..10 (0: no bound)", *stretch)
	}
	if err == nil {
		err = checkRobustness(rb, *observe, *checkpoint, *unc)
	}
	var elastic []gavel.Elastic
	if err == nil && *elShare != 0 {
		elastic, err = elasticRuns(*elShare, *elMax, *elSeeds, *elCost)
	}
	ts.Quantum, ts.SwitchCost = quantum.Seconds(), switchCost.Seconds()
	if err == nil && ts.On {
		err = checkTimeslice(ts)
	}
	rb.Seed = *seed
	if err != nil {
		fmt.Fprintf(io.Err, "gpushare sim gavel: %v\n", err)
		return exitUsage
	}
	data := gavel.Embedded()
	if c.data != "" {
		data = gavel.Dir(c.data)
	}
	traces := splitList(c.traces)
	if len(traces) == 1 && traces[0] == "all" {
		if traces, err = data.TraceNames(); err != nil {
			return simFail(io, err)
		}
	}
	var conds []gavel.Robustness
	if *robust {
		conds = gavel.StandardConditionsSeeded(*seed)
	}
	if *heldOut {
		conds = append(conds, gavel.HeldOutConditions...)
	}
	rep, err := gavel.Run(ctx, gavel.Config{Data: data, GPU: *gpu, Traces: traces, Clusters: cl, Policies: splitList(c.policies),
		Options: gavel.Options{MaxSlowdown: *slowdown, MaxStretch: stretchOption(*stretch), BoundedCost: *boundedCost, Robustness: rb, NoIntrospection: *noIntro, ObserveAfter: observe.Seconds(),
			Checkpoint: checkpoint.Seconds(), UncertaintyScale: *unc}, Workers: c.workers, Progress: c.progress(io), Conditions: conds, Elastic: elastic, Timeslice: ts})
	if err != nil {
		return simFail(io, err)
	}
	j := rep.JSON()
	return c.emit(io, rep.WriteDir, j, func() {
		if len(j.Goals) > 0 {
			fmt.Fprintf(io.Out, "gpushare's goal: the lowest average JCT of the baselines, and a p99 JCT no worse than exclusive's:\n\n%s\n", gavel.GoalsTable(j.Goals).Text())
		}
		if len(j.Conditions) > 0 {
			fmt.Fprintf(io.Out, "The goals when the model or the run times are wrong:\n\n%s\n", rep.RobustnessTable().Text())
		}
		if len(j.Elastic) > 0 {
			fmt.Fprintf(io.Out, "Elastic groups (means over %d seeds) beside the run without:\n\n%s\n", len(j.Elastic), rep.ElasticTable().Text())
		}
		if len(j.Timesliced) > 0 {
			fmt.Fprintf(io.Out, "Time-slicing beside queueing: %s\n\n%s\n", gavel.TimesliceNotes(ts), rep.TimesliceTable().Text())
		}
		fmt.Fprintf(io.Out, "All policies:\n\n%s", rep.Table().Text())
		if c.out != "" {
			fmt.Fprintf(io.Out, "\nwrote %s/gavel.md, CSV files and plots\n", c.out)
		}
	})
}

func checkRobustness(rb gavel.Robustness, observe, checkpoint time.Duration, unc float64) error {
	switch {
	case !(math.Abs(rb.Bias) < 1):
		return fmt.Errorf("-model-bias %v: want a value within (-1, 1)", rb.Bias)
	case !(rb.Noise >= 0 && rb.Noise < 1):
		return fmt.Errorf("-model-noise %v: want a standard deviation within [0, 1)", rb.Noise)
	case !(rb.RuntimeSigma >= 0 && rb.RuntimeSigma <= 5):
		return fmt.Errorf("-runtime-sigma %v: want a value within [0, 5]", rb.RuntimeSigma)
	case rb.NoRuntimes && rb.RuntimeSigma > 0:
		return fmt.Errorf("-no-runtimes and -runtime-sigma exclude each other: with no run time declared there is none to be off")
	case observe <= 0:
		return fmt.Errorf("-observe-after %v: want a positive duration", observe)
	case checkpoint < 0:
		return fmt.Errorf("-checkpoint %v: want 0 (none) or a positive interval", checkpoint)
	case !(unc > 0 && unc <= 10):
		return fmt.Errorf("-uncertainty-scale %v: want a value within (0, 10]", unc)
	}
	return nil
}

// checkTimeslice checks the time-slicing flags.
func checkTimeslice(ts gavel.Timeslice) error {
	switch {
	case ts.Quantum < 0.01 || ts.Quantum > 3600:
		return fmt.Errorf("-timeslice-quantum %vs: want a duration within 10ms..1h", ts.Quantum)
	case ts.SwitchCost <= 0 || ts.SwitchCost >= ts.Quantum:
		return fmt.Errorf("-timeslice-switch-cost %vs: want a positive duration shorter than the quantum (%vs)", ts.SwitchCost, ts.Quantum)
	case ts.MaxPerGPU < 2 || ts.MaxPerGPU > 16:
		return fmt.Errorf("-timeslice-max-per-gpu %d: want 2..16 jobs per GPU", ts.MaxPerGPU)
	}
	return nil
}

// elasticRuns checks the elastic flags and returns one elastic run per seed.
func elasticRuns(share float64, factor int, seeds string, cost time.Duration) ([]gavel.Elastic, error) {
	switch {
	case !(share > 0 && share <= 1):
		return nil, fmt.Errorf("-elastic-share %v: want a fraction within (0, 1], or 0 for none", share)
	case factor < 2 || factor > 64:
		return nil, fmt.Errorf("-elastic-max %d: want a factor within 2..64", factor)
	case cost <= 0:
		return nil, fmt.Errorf("-elastic-resize-cost %v: want a positive duration", cost)
	}
	sd, err := parseSeeds(seeds)
	if err != nil {
		return nil, fmt.Errorf("-elastic-seeds: %w", err)
	}
	out := make([]gavel.Elastic, 0, len(sd))
	for _, s := range sd {
		if s < 0 {
			return nil, fmt.Errorf("-elastic-seeds: seed %d: want seeds of at least 0", s)
		}
		out = append(out, gavel.Elastic{Share: share, MaxFactor: factor, Seed: uint64(s), ResizeCost: cost.Seconds()})
	}
	return out, nil
}

// stretchOption is -max-stretch as gavel.Options reads it: 0 there means
// the default, a negative value no bound.
func stretchOption(v float64) float64 {
	if v == 0 {
		return -1
	}
	return v
}
