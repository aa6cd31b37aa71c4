package feasible

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

var fuzzOps = []string{"", "=", "==", "is", "!=", "not", "<", "<=", ">", ">=", "version", "semver", "regexp",
	"set_contains", "set_contains_all", "set_contains_any", "is_set", "is_not_set", "distinct_hosts", "bogus"}

// FuzzConstraint evaluates arbitrary constraints on a node and a device
// group: nothing panics, a compiled literal right-hand side answers as the
// same constraint interpolated from the node does, = and != disagree
// whenever both sides are set, and is_set and is_not_set always disagree.
func FuzzConstraint(f *testing.F) {
	f.Add("${attr.kernel.name}", uint8(1), "plan9", "linux")
	f.Add("${attr.nomad.version}", uint8(10), ">= 1.2, < 2", "1.11.3")
	f.Add("${meta.x}", uint8(11), "~> 1.0", "1.0.0-rc.1+b")
	f.Add("${attr.x}", uint8(12), "(a|b", "a")
	f.Add("${node.unique.id}", uint8(15), " a, b ,c", "b")
	f.Add("${device.attr.x}", uint8(6), "80 GiB", "NaN")
	f.Add("${attr.x}", uint8(8), "1e308", "-Inf")
	f.Fuzz(func(t *testing.T, l string, op uint8, r, v string) {
		operand := fuzzOps[int(op)%len(fuzzOps)]
		n := testNode()
		n.ID = v
		n.Attributes["x"], n.Meta["x"], n.Meta["r"] = v, v, r
		lit := compile(&api.Constraint{LTarget: l, Operand: operand, RTarget: r})
		interp := compile(&api.Constraint{LTarget: l, Operand: operand, RTarget: "${meta.r}"})
		got := lit.holds(n)
		if !strings.HasPrefix(r, "${") {
			must.Eq(t, got, interp.holds(n), must.Sprintf("%q %s %q on %q", l, operand, r, v))
		}
		lv, lok := parseTarget(l).resolve(n)
		_, rok := parseTarget(r).resolve(n)
		if lok && rok {
			eq := compile(&api.Constraint{LTarget: l, Operand: "=", RTarget: r}).holds(n)
			ne := compile(&api.Constraint{LTarget: l, Operand: "!=", RTarget: r}).holds(n)
			must.NotEq(t, eq, ne, must.Sprintf("%q (%q) = / != %q", l, lv, r))
		}
		set := compile(&api.Constraint{LTarget: l, Operand: "is_set"}).holds(n)
		notSet := compile(&api.Constraint{LTarget: l, Operand: "is_not_set"}).holds(n)
		must.NotEq(t, set, notSet)

		// the same on a device group, with the value as an attribute
		d := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpushare", Name: v, Attributes: map[string]*api.Attribute{"x": {StringVal: &v}}}
		if pv := parseValue(v); pv.hasInt {
			d.Attributes["n"] = &api.Attribute{IntVal: &pv.i, Unit: pv.unit}
		}
		dk := compileDevConstraint(&api.Constraint{LTarget: l, Operand: operand, RTarget: r})
		_ = dk.holds(d)
		for _, target := range []string{"${device.attr.x}", "${device.attr.n}", "${device.model}"} {
			for _, o := range []string{"<", ">", "="} {
				_ = compileDevConstraint(&api.Constraint{LTarget: target, Operand: o, RTarget: r}).holds(d)
			}
		}
		// comparison is antisymmetric where it is defined
		a, b := parseValue(v), parseValue(r)
		if c1, ok := a.compare(&b); ok && !a.hasBool {
			c2, ok2 := b.compare(&a)
			if ok2 && !b.hasBool {
				must.Eq(t, c1, -c2, must.Sprintf("compare %q %q", v, r))
			}
		}
	})
}

// BenchmarkCheck is one group's rules (datacenters, a pool, two
// constraints, a driver, a device constraint, distinct_hosts) checked
// against 1,000 nodes, as the service does for every group of a pass.
func BenchmarkCheck(b *testing.B) {
	j := gpuJob(func(j *api.Job, tg *api.TaskGroup, task *api.Task) {
		j.Datacenters = []string{"dc1", "dc2"}
		j.NodePool = ptr("default")
		j.Constraints = []*api.Constraint{{LTarget: "${attr.kernel.name}", Operand: "=", RTarget: "linux"}, {Operand: "distinct_hosts"}}
		tg.Constraints = []*api.Constraint{{LTarget: "${attr.nomad.version}", Operand: "version", RTarget: ">= 1.10"},
			{LTarget: "${meta.gpushare_gate}", Operand: "=", RTarget: "pending"}}
		task.Resources.Devices[0].Constraints = []*api.Constraint{{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "40 GiB"}}
	})
	var nodes []*api.Node
	for i := range 1000 {
		n := gpuNode()
		n.ID = fmt.Sprintf("node-%04d", i)
		nodes = append(nodes, n)
	}
	allocs := []Alloc{{Group: "g", NodeID: "node-0001"}}
	c := NewCache()
	b.ReportAllocs()
	for b.Loop() {
		r, err := c.Rules(j, "g", gateSkip)
		if err != nil {
			b.Fatal(err)
		}
		chk := r.With(allocs)
		ok := 0
		for _, n := range nodes {
			if chk.Reason(n) == "" {
				ok++
			}
		}
		if ok != 999 {
			b.Fatalf("%d feasible, want 999", ok)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(nodes)), "ns/node")
}
