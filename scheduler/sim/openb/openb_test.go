package openb

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/scheduler/sim/report"
	"github.com/shoenig/test/must"
)

func TestReadNodes(t *testing.T) {
	cases := []struct {
		name, in string
		want     []Node
		err      bool
	}{
		{"ok", "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,P100\nn2,96000,393216,8,G2\n",
			[]Node{{"n1", 64000, 262144, 2, "P100"}, {"n2", 96000, 393216, 8, "G2"}}, false},
		{"missing column", "sn,cpu_milli,memory_mib,gpu\nn1,1,1,1\n", nil, true},
		{"negative", "sn,cpu_milli,memory_mib,gpu,model\nn1,-1,1,1,T4\n", nil, true},
		{"gpu without model", "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,\n", nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadNodes(strings.NewReader(c.in))
			if c.err {
				must.True(t, errors.Is(err, ErrFormat))
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

func TestReadPods(t *testing.T) {
	const head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
	cases := []struct {
		name, in string
		want     []Pod
		err      bool
	}{
		{"fraction, whole, cpu-only, spec", head + "a,6000,12288,1,460,,LS\nb,8000,1,2,1000,V100M16|V100M32,BE\nc,1000,1,0,0,,LS\n",
			[]Pod{{"a", 6000, 12288, 1, 460, nil}, {"b", 8000, 1, 2, 1000, []string{"V100M16", "V100M32"}}, {"c", 1000, 1, 0, 0, nil}}, false},
		{"five columns (multigpu50)", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,2,1,1000\n", []Pod{{"a", 1, 2, 1, 1000, nil}}, false},
		{"fractional multi-GPU", head + "a,1,1,2,500,,LS\n", nil, true},
		{"milli without GPUs", head + "a,1,1,0,500,,LS\n", nil, true},
		{"not a number", head + "a,x,1,0,0,,LS\n", nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadPods(strings.NewReader(c.in))
			if c.err {
				must.True(t, errors.Is(err, ErrFormat))
				return
			}
			must.NoError(t, err)
			must.Eq(t, c.want, got)
		})
	}
}

// TestEmbeddedData checks the shipped files against their provenance
// (data/README.md and /work/shared/data/README.md): 1,213 GPU nodes with
// 6,212 GPUs and 107,018 cores; 8,152 / 8,152 / 9,061 pods; 6 policies x 10
// seeds of published curves per trace.
func TestEmbeddedData(t *testing.T) {
	d := Embedded()
	nodes, err := d.Nodes()
	must.NoError(t, err)
	gpus, cpu := 0, int64(0)
	for _, n := range nodes {
		gpus += n.GPUs
		cpu += n.CPU
	}
	must.EqOp(t, 1213, len(nodes))
	must.EqOp(t, 6212, gpus)
	must.EqOp(t, int64(107018000), cpu)
	for trace, want := range map[string]int{"default": 8152, "gpushare40": 8152, "multigpu50": 9061} {
		pods, err := d.Pods(trace)
		must.NoError(t, err)
		must.EqOp(t, want, len(pods), must.Sprint(trace))
	}
	_, err = d.Pods("nope")
	must.Error(t, err)
	pub, err := d.Published()
	must.NoError(t, err)
	for _, trace := range Traces {
		must.MapLen(t, 6, pub[trace])
		for _, seeds := range pub[trace] {
			must.MapLen(t, 10, seeds)
		}
	}
	// The published means quoted in FGD_METHOD.md section 8.
	m, n := pub.Mean("default", "FGD", 130)
	must.EqOp(t, 10, n)
	must.Eq(t, 95.39, math.Round(m*100)/100)
	m, _ = pub.Mean("multigpu50", "Random", 100)
	must.Eq(t, 81.28, math.Round(m*100)/100)
	// The same mean to the last bit on every call (seeds summed in order,
	// not in map order): 90.275 must not print as 90.27 in one run and
	// 90.28 in the next.
	want, _ := pub.Mean("multigpu50", "Random", 130)
	for range 50 {
		got, _ := pub.Mean("multigpu50", "Random", 130)
		must.EqOp(t, want, got)
	}
}

func tinyNodes() []Node {
	return []Node{{"n-b", 8000, 1 << 20, 2, "T4"}, {"n-a", 8000, 1 << 20, 2, "T4"}, {"n-c", 8000, 1 << 20, 1, "T4"}}
}

func TestGenerate(t *testing.T) {
	pods := []Pod{{Name: "p3", NumGPU: 1, GPUMilli: 500}, {Name: "p1", NumGPU: 1, GPUMilli: 1000},
		{Name: "p2", NumGPU: 2, GPUMilli: 1000}, {Name: "p0", CPU: 1000}}
	nodes := tinyNodes() // 5 GPUs: target 6500 milli at 1.3
	t.Run("deterministic per seed", func(t *testing.T) {
		a := Generate(nodes, pods, 42, Tune)
		b := Generate(nodes, pods, 42, Tune)
		must.Eq(t, a, b)
		c := Generate(nodes, pods, 43, Tune)
		must.NotEq(t, a.NodeOrder, c.NodeOrder, must.Sprint("seeds 42 and 43 should order nodes differently"))
	})
	t.Run("tuned up to the target", func(t *testing.T) {
		w := Generate(nodes, pods, 42, Tune)
		var total int64
		for _, p := range w.Pods {
			total += p.TotalMilli()
		}
		must.EqOp(t, int64(5000), w.CapacityMilli)
		must.LessEq(t, int64(6500), total)
		// The originals come first, shuffled; clones follow.
		names := map[string]bool{}
		for _, p := range w.Pods[:4] {
			names[p.Name] = true
		}
		must.MapLen(t, 4, names)
		for _, p := range w.Pods[4:] {
			must.StrContains(t, p.Name, "-tuned-")
		}
	})
	t.Run("tuned down to the target", func(t *testing.T) {
		var many []Pod
		for i := range 20 {
			many = append(many, Pod{Name: string(rune('a' + i)), NumGPU: 1, GPUMilli: 1000})
		}
		w := Generate(nodes, many, 7, Tune)
		must.SliceLen(t, 6, w.Pods) // 6 x 1000 <= 6500
	})
	t.Run("node order is a permutation", func(t *testing.T) {
		w := Generate(nodes, pods, 51, Tune)
		seen := map[int]bool{}
		for _, i := range w.NodeOrder {
			seen[i] = true
		}
		must.MapLen(t, 3, seen)
	})
}

// TestGenerateOpenb pins the FGD method's demand ratios (FGD_METHOD.md
// section 3): tuning stops at or below 130% of 6,212 GPUs.
func TestGenerateOpenb(t *testing.T) {
	d := Embedded()
	nodes, err := d.Nodes()
	must.NoError(t, err)
	for _, trace := range Traces {
		pods, err := d.Pods(trace)
		must.NoError(t, err)
		w := Generate(nodes, pods, 42, Tune)
		var total int64
		for _, p := range w.Pods {
			total += p.TotalMilli()
		}
		ratio := float64(total) / float64(w.CapacityMilli)
		must.Between(t, 1.29, ratio, 1.3, must.Sprint(trace))
	}
}

func TestBinner(t *testing.T) {
	b := binner{capacity: 1000}
	// arrived 10 -> bin 1 (1%); 25 -> 2 (2.5 rounds half to even); 35 -> 4 (3.5 -> 4).
	must.EqOp(t, 1, b.add(10, 10))
	must.EqOp(t, 2, b.add(25, 10))
	must.EqOp(t, 2, b.add(20, 20))
	must.EqOp(t, 4, b.add(35, 30))
	c := b.curve()
	must.Eq(t, 1.0, c[1])
	must.Eq(t, 1.5, c[2]) // mean of 1% and 2%
	must.Eq(t, 1.5, c[3]) // empty: bin 2
	must.Eq(t, 3.0, c[4]) //
	must.Eq(t, 3.0, c[5]) // empty: bin 4
	must.True(t, math.IsNaN(c[7]))
	must.Eq(t, 1.0, c[0]) // empty: bin 1 (x-1 is out of range)
}

func TestValidate(t *testing.T) {
	pub := Published{"default": {"FGD": {42: curveAt(95.0, 96.0), 43: curveAt(95.5, 96.5)}, "BestFit": {42: curveAt(90, 90)}}}
	sums := []Summary{
		{Trace: "default", Policy: "fgd", Seeds: 2, Curve: curveAt(94.0, 97.5)},
		{Trace: "default", Policy: "best-fit", Seeds: 1, Curve: curveAt(90.5, 88.9)},
		{Trace: "default", Policy: "gpushare", Seeds: 1, Curve: curveAt(99, 99)},
	}
	got := Validate(sums, pub)
	low := 88.9 // a variable: the diff is computed in float64, as Validate does
	must.SliceLen(t, 4, got)
	want := []Check{
		{Trace: "default", Policy: "fgd", Demand: 100, Ours: 94.0, Published: 95.25, Diff: -1.25, Seeds: 2, OK: false},
		{Trace: "default", Policy: "fgd", Demand: 130, Ours: 97.5, Published: 96.25, Diff: 1.25, Seeds: 2, OK: false},
		{Trace: "default", Policy: "best-fit", Demand: 100, Ours: 90.5, Published: 90, Diff: 0.5, Seeds: 1, OK: true},
		{Trace: "default", Policy: "best-fit", Demand: 130, Ours: 88.9, Published: 90, Diff: report.Num(low - 90), Seeds: 1, OK: false},
	}
	must.Eq(t, want, got)
}

func curveAt(at100, at130 float64) Curve {
	c := NewCurve()
	c[100], c[130] = at100, at130
	return c
}

func TestBestWorst(t *testing.T) {
	nodes, err := Snapshot([]Node{{"x", 96000, 1 << 20, 8, "V100"}}, []int{0})
	must.NoError(t, err)
	_ = nodes
	b := bestLinks{}
	n, _ := nodes.Node("x")
	// GPUs 0 and 3 are NV2-connected on the DGX-1 V100; 0 and 5 are not.
	ok, err := b.isBest(nodes, placementOn(n.ID, 0, 3))
	must.NoError(t, err)
	must.True(t, ok)
	ok, err = b.isBest(nodes, placementOn(n.ID, 0, 5))
	must.NoError(t, err)
	must.False(t, ok)
}

// TestTypicalPods pins FGD's typical pods of the default trace
// (FGD_METHOD.md section 6): 35 of 91 kinds cover 95.3% of pods.
func TestTypicalPods(t *testing.T) {
	pods, err := Embedded().Pods("default")
	must.NoError(t, err)
	must.SliceLen(t, 35, Mix(pods, Coverage))
	must.SliceLen(t, 91, Mix(pods, 1))
}

func TestVsFGDSeedsAhead(t *testing.T) {
	res := func(policy string, seed int64, at130 float64) *Result {
		return &Result{Trace: "default", Policy: policy, Seed: seed, Alloc: curveAt(at130, at130), Frag: NewCurve()}
	}
	r := &Report{Results: []*Result{
		res("fgd", 42, 95.0), res("gpushare", 42, 95.2),
		res("fgd", 43, 95.4), res("gpushare", 43, 95.3),
		res("fgd", 44, 95.1), res("gpushare", 44, 95.1), // a tie is not ahead
		res("gpushare", 45, 99), // no fgd run for this seed: not paired
	}}
	is := r.VsFGD(r.Summaries())
	must.SliceLen(t, 1, is)
	must.EqOp(t, 1, is[0].Ahead)
	must.EqOp(t, 3, is[0].Paired)
	must.StrContains(t, VsFGDTable(is).Markdown(), "| 1/3 |")
}
