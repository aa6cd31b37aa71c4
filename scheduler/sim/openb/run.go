package openb

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim"
	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// Baselines are the policies validated against the published numbers.
var Baselines = []string{placement.PolicyRandom, placement.PolicyBestFit, placement.PolicyGPUPacking, placement.PolicyFGD}

// PolicyFGDOwnMix is an ablation for -gpushare-mix-coverage experiments:
// FGD scoring with gpushare's mix of expected requests, to tell the
// policy's gain from the mix's.
const PolicyFGDOwnMix = "fgd-own-mix"

// DefaultPolicies are every policy of the placement core: the validated
// baselines, the other baselines (first-fit, HiveD without sharing and
// Nomad's own random instance choice, the last two rounding fractions up to
// whole GPUs) and gpushare.
var DefaultPolicies = []string{placement.PolicyRandom, placement.PolicyFirstFit, placement.PolicyBestFit, placement.PolicyGPUPacking,
	placement.PolicyFGD, placement.PolicyHived, placement.PolicyNomadNative, placement.PolicyGpushare}

// corePolicy maps a policy name of this package to the placement core's,
// and says whether it uses gpushare's mix.
func corePolicy(name string) (string, bool) {
	switch name {
	case PolicyFGDOwnMix:
		return placement.PolicyFGD, true
	case placement.PolicyGpushare:
		return name, true
	}
	return name, false
}

// DefaultGpushareCoverage: gpushare expects the same mix as FGD's typical
// pods, so that gpushare and fgd differ only in the policy. Other values
// are an experiment (compare with policy fgd-own-mix).
const DefaultGpushareCoverage = Coverage

// DefaultSeeds are the FGD paper's seeds.
var DefaultSeeds = []int64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}

// Config selects what Run replays.
type Config struct {
	Data     Data
	Traces   []string
	Policies []string
	Seeds    []int64
	// GpushareCoverage is the share of pods the gpushare policy's mix of
	// expected requests covers (0 means DefaultGpushareCoverage). The
	// baselines use FGD's typical pods (95%), as published.
	GpushareCoverage float64
	// Limits adds the offline reference packer and the upper bound
	// (Limits) for every trace and seed.
	Limits bool
	// Migrations adds gpushare with a budget of migrations (ReplayMigrate,
	// not the FGD method) for every trace and seed, reported apart.
	Migrations bool
	// Workers replay in parallel (default 1).
	Workers int
	// Progress, when not nil, receives one line per finished replay.
	Progress func(line string)
}

// Report is every replay of a run and the published numbers.
type Report struct {
	Results   []*Result
	Published Published
	// PublishedFrag are the published fragmentation ratios.
	PublishedFrag Published
	// Limits are the offline packer and the upper bound per trace, seed
	// and LimitBins point (Config.Limits).
	Limits []Limit
	// Migrated are gpushare's replays with a budget of migrations
	// (Config.Migrations); they are not part of Results.
	Migrated []*Result
	// CapacityMilli is the cluster's GPU capacity.
	CapacityMilli int64
}

type job struct {
	trace, policy string
	seed          int64
}

// limitJob is the policy name of a job that computes Limits.
const limitJob = "(limits)"

// PolicyMigrate names gpushare with a budget of migrations in Migrated.
const PolicyMigrate = "gpushare+migrations"

// Run replays every trace x policy x seed. Workloads are generated once per
// trace and seed and shared by the policies.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	nodes, err := cfg.Data.Nodes()
	if err != nil {
		return nil, err
	}
	pub, err := cfg.Data.Published()
	if err != nil {
		return nil, err
	}
	pubFrag, err := cfg.Data.PublishedFrag()
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Policies {
		core, _ := corePolicy(p)
		if _, err := placement.New(core, placement.Options{}); err != nil {
			return nil, err
		}
	}
	type traceData struct {
		pods        []Pod
		mix, ownMix placement.Mix
	}
	cov := cfg.GpushareCoverage
	if cov == 0 {
		cov = DefaultGpushareCoverage
	}
	if !(cov > 0 && cov <= 1) {
		return nil, fmt.Errorf("gpushare mix coverage %v must be within (0, 1]", cov)
	}
	traces := map[string]traceData{}
	for _, tr := range cfg.Traces {
		pods, err := cfg.Data.Pods(tr)
		if err != nil {
			return nil, err
		}
		traces[tr] = traceData{pods, Mix(pods, Coverage), Mix(pods, cov)}
	}
	var jobs []job
	if cfg.Limits { // first: they take longest
		for _, tr := range cfg.Traces {
			for _, seed := range cfg.Seeds {
				jobs = append(jobs, job{tr, limitJob, seed})
			}
		}
	}
	for _, tr := range cfg.Traces {
		for _, seed := range cfg.Seeds {
			if cfg.Migrations {
				jobs = append(jobs, job{tr, PolicyMigrate, seed})
			}
			for _, p := range cfg.Policies {
				jobs = append(jobs, job{tr, p, seed})
			}
		}
	}
	results := make([]*Result, len(jobs))
	limits := make([][]Limit, len(jobs))
	var (
		wlMu     sync.Mutex
		wlCache  = map[job]Workload{}
		workload = func(tr string, seed int64) Workload {
			wlMu.Lock()
			defer wlMu.Unlock()
			k := job{trace: tr, seed: seed}
			w, ok := wlCache[k]
			if !ok {
				w = Generate(nodes, traces[tr].pods, seed, Tune)
				wlCache[k] = w
			}
			return w
		}
	)
	err = sim.Parallel(ctx, len(jobs), cfg.Workers, func(i int) error {
		j := jobs[i]
		mix := traces[j.trace].mix
		if j.policy == limitJob {
			ls, err := Limits(j.trace, j.seed, nodes, workload(j.trace, j.seed), mix)
			limits[i] = ls
			return err
		}
		core, own := corePolicy(j.policy)
		if own {
			mix = traces[j.trace].ownMix
		}
		var r *Result
		var err error
		if j.policy == PolicyMigrate {
			r, err = ReplayMigrate(j.trace, placement.PolicyGpushare, j.seed, nodes, workload(j.trace, j.seed), traces[j.trace].ownMix)
		} else {
			r, err = Replay(j.trace, core, j.seed, nodes, workload(j.trace, j.seed), mix, nil)
		}
		if err != nil {
			return err
		}
		r.Policy = j.policy
		results[i] = r
		return nil
	}, func(i, done int) {
		if cfg.Progress != nil {
			j, r := jobs[i], results[i]
			if j.policy == limitJob {
				l := limits[i][len(limits[i])-1]
				cfg.Progress(fmt.Sprintf("openb %d/%d: %s limits seed %d: offline %.2f%%, bound %.2f%% at %d%% arrived demand",
					done, len(jobs), j.trace, j.seed, l.Offline, l.Bound, l.Demand))
				return
			}
			cfg.Progress(fmt.Sprintf("openb %d/%d: %s %s seed %d: %.2f%% allocated at 100%%, %.2f%% at 130%% arrived demand",
				done, len(jobs), j.trace, j.policy, j.seed, r.Alloc[100], r.Alloc[MaxDemand]))
		}
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{Published: pub, PublishedFrag: pubFrag}
	for _, n := range nodes {
		rep.CapacityMilli += int64(n.GPUs) * 1000
	}
	for i, r := range results {
		switch {
		case r == nil:
		case r.Policy == PolicyMigrate:
			rep.Migrated = append(rep.Migrated, r)
		default:
			rep.Results = append(rep.Results, r)
		}
		rep.Limits = append(rep.Limits, limits[i]...)
	}
	return rep, nil
}

// Summary is one policy on one trace, over seeds.
type Summary struct {
	Trace  string `json:"trace"`
	Policy string `json:"policy"`
	Seeds  int    `json:"seeds"`
	// Alloc100 and Alloc130 are the mean allocation ratios (%) at 100% and
	// 130% arrived demand; SD130 the seeds' standard deviation at 130%.
	Alloc100 report.Num `json:"alloc_ratio_100"`
	Alloc130 report.Num `json:"alloc_ratio_130"`
	SD130    report.Num `json:"alloc_ratio_130_sd"`
	Frag130  report.Num `json:"frag_ratio_130"`
	// PublishedFrag130 is the published mean fragmentation ratio at 130%
	// of the same policy (baselines only).
	PublishedFrag130 report.Num `json:"published_frag_ratio_130,omitempty"`
	// BestCellShare is the share (%) of placed multi-GPU pods that got the
	// best-connected GPUs of their node.
	BestCellShare report.Num `json:"best_cell_share"`
	MultiGPU      int        `json:"multi_gpu_pods"`
	// Curve is the mean allocation ratio per bin of arrived demand.
	Curve Curve `json:"-"`
}

// Summaries averages the results per trace and policy, in run order.
func (r *Report) Summaries() []Summary {
	var out []Summary
	index := map[[2]string]int{}
	group := map[[2]string][]*Result{}
	for _, res := range r.Results {
		k := [2]string{res.Trace, res.Policy}
		if _, ok := index[k]; !ok {
			index[k] = len(out)
			out = append(out, Summary{Trace: res.Trace, Policy: res.Policy})
		}
		group[k] = append(group[k], res)
	}
	for i := range out {
		rs := group[[2]string{out[i].Trace, out[i].Policy}]
		s := &out[i]
		s.Seeds = len(rs)
		s.Curve = NewCurve()
		for b := range s.Curve {
			s.Curve[b] = mean(rs, func(r *Result) float64 { return r.Alloc[b] })
		}
		s.Alloc100, s.Alloc130 = report.Num(s.Curve[100]), report.Num(s.Curve[MaxDemand])
		s.SD130 = report.Num(sd(rs, func(r *Result) float64 { return r.Alloc[MaxDemand] }))
		s.Frag130 = report.Num(mean(rs, func(r *Result) float64 { return r.Frag[MaxDemand] }))
		if name, ok := FGDName[s.Policy]; ok {
			pf, _ := r.PublishedFrag.Mean(s.Trace, name, MaxDemand)
			s.PublishedFrag130 = report.Num(pf)
		}
		best := 0
		for _, r := range rs {
			s.MultiGPU += r.MultiGPU
			best += r.BestCell
		}
		s.BestCellShare = report.Num(math.NaN())
		if s.MultiGPU > 0 {
			s.BestCellShare = report.Num(100 * float64(best) / float64(s.MultiGPU))
		}
	}
	return out
}

func mean(rs []*Result, f func(*Result) float64) float64 {
	sum, n := 0.0, 0
	for _, r := range rs {
		if v := f(r); !math.IsNaN(v) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func sd(rs []*Result, f func(*Result) float64) float64 {
	m := mean(rs, f)
	sum, n := 0.0, 0
	for _, r := range rs {
		if v := f(r); !math.IsNaN(v) {
			sum += (v - m) * (v - m)
			n++
		}
	}
	if n < 2 {
		return 0
	}
	return math.Sqrt(sum / float64(n-1))
}
