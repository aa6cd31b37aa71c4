package openb

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/sim/report"
)

// JSON is the machine-readable result of a run.
type JSON struct {
	Summaries  []Summary     `json:"summaries"`
	Validation []Check       `json:"validation"`
	VsFGD      []Improvement `json:"gpushare_vs_fgd,omitempty"`
	// Limits set gpushare and fgd beside the offline packer and the upper
	// bound (Config.Limits); LimitSeeds are every seed's references.
	Limits     []LimitSummary `json:"limits,omitempty"`
	LimitSeeds []Limit        `json:"limit_seeds,omitempty"`
	// Migrations is gpushare with a budget of migrations (not the FGD
	// method; Config.Migrations).
	Migrations []Migration `json:"migrations,omitempty"`
}

// Improvement compares gpushare with FGD on one trace at 130% demand.
type Improvement struct {
	Trace        string     `json:"trace"`
	Gpushare     report.Num `json:"gpushare"`
	FGDOurs      report.Num `json:"fgd_ours"`
	FGDPublished report.Num `json:"fgd_published"`
	// FGDOwnMix is FGD scoring with gpushare's mix (the ablation).
	FGDOwnMix report.Num `json:"fgd_own_mix"`
	// BestCell is gpushare's best-cell share (%); FGDBestCell FGD's.
	BestCell    report.Num `json:"best_cell_share"`
	FGDBestCell report.Num `json:"fgd_best_cell_share"`
	// Ahead counts the seeds on which gpushare allocated more than our fgd
	// at 130%, of Paired seeds both ran.
	Ahead  int `json:"seeds_ahead_of_fgd"`
	Paired int `json:"paired_seeds"`
}

// JSON returns the result for --json.
func (r *Report) JSON() JSON {
	sums := r.Summaries()
	j := JSON{Summaries: sums, Validation: Validate(sums, r.Published), VsFGD: r.VsFGD(sums)}
	if len(r.Limits) > 0 {
		j.Limits, j.LimitSeeds = r.LimitSummaries(sums), r.Limits
	}
	if len(r.Migrated) > 0 {
		j.Migrations = r.MigrationSummaries()
	}
	return j
}

// VsFGD compares gpushare with our and the published FGD at 130%.
func (r *Report) VsFGD(sums []Summary) []Improvement {
	by := map[[2]string]Summary{}
	var traces []string
	for _, s := range sums {
		if s.Policy == placement.PolicyGpushare {
			traces = append(traces, s.Trace) // one summary per trace and policy
		}
		by[[2]string{s.Trace, s.Policy}] = s
	}
	var out []Improvement
	for _, tr := range traces {
		g := by[[2]string{tr, placement.PolicyGpushare}]
		f, hasF := by[[2]string{tr, placement.PolicyFGD}]
		pub, _ := r.Published.Mean(tr, "FGD", MaxDemand)
		imp := Improvement{Trace: tr, Gpushare: g.Alloc130, FGDPublished: report.Num(pub), BestCell: g.BestCellShare}
		imp.FGDOurs, imp.FGDBestCell, imp.FGDOwnMix = report.Num(nan()), report.Num(nan()), report.Num(nan())
		if hasF {
			imp.FGDOurs, imp.FGDBestCell = f.Alloc130, f.BestCellShare
		}
		if a, ok := by[[2]string{tr, PolicyFGDOwnMix}]; ok {
			imp.FGDOwnMix = a.Alloc130
		}
		imp.Ahead, imp.Paired = r.seedsAhead(tr)
		out = append(out, imp)
	}
	return out
}

func nanIfZero(v float64) float64 {
	if v == 0 {
		return nan()
	}
	return v
}

func nan() float64 { var z float64; return z / z }

// SummaryTable lists every policy on every trace.
func SummaryTable(sums []Summary) report.Table {
	t := report.Table{Header: []string{"trace", "policy", "seeds", "alloc % @100", "alloc % @130", "sd @130", "frag % @130", "frag % @130 published", "best-cell %"}}
	for _, s := range sums {
		t.Rows = append(t.Rows, []string{s.Trace, s.Policy, strconv.Itoa(s.Seeds), report.F(s.Alloc100), report.F(s.Alloc130),
			report.F(s.SD130), report.F1(s.Frag130), report.F1(nanIfZero(float64(s.PublishedFrag130))), report.F1(s.BestCellShare)})
	}
	return t
}

// ValidationTable shows our baselines against the published means.
func ValidationTable(cs []Check) report.Table {
	t := report.Table{Header: []string{"trace", "policy", "demand %", "ours", "published", "diff (pp)", "within 1.0 pp"}}
	for _, c := range cs {
		ok := "yes"
		if !c.OK {
			ok = "NO"
		}
		t.Rows = append(t.Rows, []string{c.Trace, c.Policy, strconv.Itoa(c.Demand), report.F(c.Ours), report.F(c.Published), fmt.Sprintf("%+.2f", c.Diff), ok})
	}
	return t
}

// seedsAhead compares gpushare with fgd seed by seed at 130%.
func (r *Report) seedsAhead(trace string) (ahead, paired int) {
	fgd := map[int64]float64{}
	for _, res := range r.Results {
		if res.Trace == trace && res.Policy == placement.PolicyFGD {
			fgd[res.Seed] = res.Alloc[MaxDemand]
		}
	}
	for _, res := range r.Results {
		if f, ok := fgd[res.Seed]; ok && res.Trace == trace && res.Policy == placement.PolicyGpushare {
			paired++
			if res.Alloc[MaxDemand] > f {
				ahead++
			}
		}
	}
	return ahead, paired
}

// VsFGDTable shows gpushare against FGD at 130%.
func VsFGDTable(is []Improvement) report.Table {
	t := report.Table{Header: []string{"trace", "gpushare @130", "FGD published @130", "gpushare - published", "fgd (ours) @130", "fgd-own-mix @130", "seeds gpushare > fgd", "gpushare best-cell %", "fgd best-cell %"}}
	for _, i := range is {
		t.Rows = append(t.Rows, []string{i.Trace, report.F(i.Gpushare), report.F(i.FGDPublished), fmt.Sprintf("%+.2f", i.Gpushare-i.FGDPublished),
			report.F(i.FGDOurs), report.F(i.FGDOwnMix), fmt.Sprintf("%d/%d", i.Ahead, i.Paired), report.F1(i.BestCell), report.F1(i.FGDBestCell)})
	}
	return t
}

// WriteDir writes CSV files, a markdown summary and one plot per trace
// (format "svg" or "png") into dir.
func (r *Report) WriteDir(dir, format string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j := r.JSON()
	curves := report.Table{Header: []string{"trace", "policy", "seed"}}
	for b := 0; b <= MaxDemand; b++ {
		curves.Header = append(curves.Header, strconv.Itoa(b))
	}
	for _, res := range r.Results {
		row := []string{res.Trace, res.Policy, strconv.FormatInt(res.Seed, 10)}
		for _, v := range res.Alloc {
			row = append(row, report.F(v))
		}
		curves.Rows = append(curves.Rows, row)
	}
	files := map[string]report.Table{
		"openb_alloc_ratio.csv": curves,
		"openb_summary.csv":     SummaryTable(j.Summaries),
		"openb_validation.csv":  ValidationTable(j.Validation),
	}
	if len(j.VsFGD) > 0 {
		files["openb_gpushare_vs_fgd.csv"] = VsFGDTable(j.VsFGD)
	}
	if len(j.Limits) > 0 {
		files["openb_limits.csv"] = LimitTable(j.Limits)
		files["openb_limits_seeds.csv"] = LimitSeedTable(j.LimitSeeds)
		files["openb_stranded.csv"] = r.StrandTable()
	}
	if len(j.Migrations) > 0 {
		files["openb_migrations.csv"] = MigrationTable(j.Migrations)
	}
	for name, t := range files {
		if err := t.WriteCSV(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	var md strings.Builder
	md.WriteString("# openb: GPU allocation ratio (FGD paper's method)\n\n")
	md.WriteString("Allocation ratio = GPU milli allocated / cluster capacity (6,212 GPUs), at 100% and 130% arrived GPU demand; mean over seeds. " +
		"Best-cell % = placed multi-GPU pods whose GPUs have the best worst link their node allows (8-GPU nodes as DGX-1 V100, 4-GPU nodes as two-socket PCIe). " +
		"For hived and nomad-native, which give a fractional pod a whole GPU, the ratio counts the GPU milli pods requested. Every policy uses FGD's typical pods (the most popular kinds covering 95% of pods) as its expected mix of requests, so gpushare and fgd differ only in the policy: gpushare counts a node's free GPUs as fragmented for a kind when the node lacks the kind's memory (its median), which FGD leaves out, and breaks equal scores towards nodes already in use.\n\n")
	seeds := map[int64]bool{}
	var seedList []string
	for _, res := range r.Results {
		if !seeds[res.Seed] {
			seeds[res.Seed] = true
			seedList = append(seedList, strconv.FormatInt(res.Seed, 10))
		}
	}
	fmt.Fprintf(&md, "Seeds: %s. Regenerate with `gpushare sim openb --out DIR`.\n\n", strings.Join(seedList, ", "))
	md.WriteString("## Validation against the published FGD numbers\n\n" + ValidationTable(j.Validation).Markdown())
	if len(j.VsFGD) > 0 {
		md.WriteString("\n## gpushare vs FGD at 130%\n\n" + VsFGDTable(j.VsFGD).Markdown())
	}
	if len(j.Limits) > 0 {
		md.WriteString("\n## How close to the limit\n\n" + LimitsIntro + "\n\n" + LimitTable(j.Limits).Markdown())
		md.WriteString("\nWhere the GPU capacity left free at 130% goes (% of capacity, mean over seeds): " + StrandIntro + "\n\n" + r.StrandTable().Markdown())
	}
	if len(j.Migrations) > 0 {
		md.WriteString("\n## gpushare with a budget of migrations\n\n" + MigrationIntro + "\n\n" + MigrationTable(j.Migrations).Markdown())
	}
	md.WriteString("\n## All policies\n\n" + SummaryTable(j.Summaries).Markdown())
	traces := map[string]bool{}
	var order []string
	for _, s := range j.Summaries {
		if !traces[s.Trace] {
			traces[s.Trace] = true
			order = append(order, s.Trace)
		}
	}
	md.WriteString("\n## Plots\n\n")
	for _, tr := range order {
		for _, zoom := range []bool{false, true} {
			name := "openb_alloc_" + tr
			if zoom {
				name += "_zoom"
			}
			name += "." + format
			if err := r.plot(tr, j.Summaries, zoom, filepath.Join(dir, name)); err != nil {
				return err
			}
			fmt.Fprintf(&md, "![%s](%s)\n\n", tr, name)
		}
	}
	return os.WriteFile(filepath.Join(dir, "openb.md"), []byte(md.String()), 0o644)
}

func (r *Report) plot(trace string, sums []Summary, zoom bool, path string) error {
	x := make([]float64, MaxDemand+1)
	for i := range x {
		x[i] = float64(i)
	}
	p := report.Plot{Title: "openb " + trace + ": GPU allocation ratio", XLabel: "arrived GPU demand (% of capacity)", YLabel: "GPU allocation ratio (%)"}
	for _, s := range sums {
		if s.Trace == trace {
			p.Series = append(p.Series, report.Series{Name: s.Policy, X: x, Y: s.Curve[:], Dashed: s.Policy == PolicyFGDOwnMix})
		}
	}
	if pub, ok := r.Published[trace]["FGD"]; ok && len(pub) > 0 {
		y := make([]float64, MaxDemand+1)
		for b := range y {
			y[b], _ = r.Published.Mean(trace, "FGD", b)
		}
		p.Series = append(p.Series, report.Series{Name: "FGD (published)", X: x, Y: y, Dashed: true})
	}
	if zoom {
		p.Title += " (from 80% demand)"
		p.XMin, p.XMax, p.YMin, p.YMax = 80, MaxDemand, 75, 100
	}
	return p.Save(path)
}
