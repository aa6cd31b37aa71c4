package feasible

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

func ptr[T any](v T) *T { return &v }

// testNode is a Linux node in dc1 with a few attributes and meta.
func testNode() *api.Node {
	return &api.Node{ID: "node-1", Name: "gpu-a", Datacenter: "dc1", NodeClass: "gpu", NodePool: "default",
		Attributes: map[string]string{"kernel.name": "linux", "kernel.version": "6.1.0-18-amd64", "nomad.version": "1.11.3",
			"cpu.numcores": "64", "cpu.frequency": "2450.5", "os.name": "debian", "unique.storage.volume": "/dev/nvme0n1",
			"driver.docker": "1", "driver.exec": "false", "tags": "a, b,c", "semver": "1.2.3-beta.1", "empty": ""},
		Meta: map[string]string{"rack": "r1", "zone": "z-2"},
	}
}

// TestTargets mirrors Nomad's resolveTarget: the node fields, ${attr.*},
// ${meta.*}, literals, and nothing else (no ${node.region}).
func TestTargets(t *testing.T) {
	n := testNode()
	cases := []struct {
		target string
		want   string
		found  bool
	}{
		{"${node.unique.id}", "node-1", true},
		{"${node.unique.name}", "gpu-a", true},
		{"${node.datacenter}", "dc1", true},
		{"${node.class}", "gpu", true},
		{"${node.pool}", "default", true},
		{"${attr.kernel.name}", "linux", true},
		{"${attr.missing}", "", false},
		{"${attr.empty}", "", true},
		{"${meta.rack}", "r1", true},
		{"${meta.nope}", "", false},
		{"${node.region}", "", false},
		{"${device.model}", "", false},
		{"plain", "plain", true},
		{"", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.target, func(t *testing.T) {
			v, ok := parseTarget(tc.target).resolve(n)
			must.Eq(t, tc.want, v)
			must.Eq(t, tc.found, ok)
		})
	}
}

// TestOperators mirrors checkConstraint (scheduler/feasible/feasible.go)
// for every operator Nomad knows, on a node's targets.
func TestOperators(t *testing.T) {
	n := testNode()
	cases := []struct {
		name     string
		l, op, r string
		want     bool
	}{
		{"equal", "${attr.kernel.name}", "=", "linux", true},
		{"equal no", "${attr.kernel.name}", "=", "plan9", false},
		{"== alias", "${attr.kernel.name}", "==", "linux", true},
		{"is alias", "${meta.rack}", "is", "r1", true},
		{"empty operator is =", "${meta.rack}", "", "r1", true},
		{"equal missing never", "${attr.missing}", "=", "", false},
		{"not equal", "${attr.kernel.name}", "!=", "plan9", true},
		{"not alias", "${attr.kernel.name}", "not", "linux", false},
		{"not equal missing vs empty literal", "${attr.missing}", "!=", "", false},
		{"not equal missing vs value", "${attr.missing}", "!=", "x", true},
		{"lt ints", "${attr.cpu.numcores}", "<", "128", true},
		{"lt ints not lexical", "${attr.cpu.numcores}", "<", "9", false},
		{"ge ints", "${attr.cpu.numcores}", ">=", "64", true},
		{"gt floats", "${attr.cpu.frequency}", ">", "2450.4", true},
		{"le mixed int float", "${attr.cpu.numcores}", "<=", "64.5", true},
		{"lexical", "${attr.os.name}", "<", "fedora", true},
		{"order missing", "${attr.missing}", "<", "z", false},
		{"version", "${attr.nomad.version}", "version", ">= 1.10, < 2", true},
		{"version no", "${attr.nomad.version}", "version", "< 1.11", false},
		{"version: a prerelease never meets a release constraint", "${attr.kernel.version}", "version", ">= 6.0", false},
		{"version bad constraint", "${attr.nomad.version}", "version", "about one", false},
		{"version bad left", "${attr.os.name}", "version", ">= 1", false},
		{"semver", "${attr.nomad.version}", "semver", ">= 1.11.0", true},
		{"semver prerelease below release", "${attr.semver}", "semver", "< 1.2.3", true},
		{"semver equal no op", "${attr.nomad.version}", "semver", "1.11.3", true},
		{"semver short version", "${attr.nomad.version}", "semver", ">= 1.11", true},
		{"semver malformed", "${attr.nomad.version}", "semver", "~> 1.11", false},
		{"semver two", "${attr.nomad.version}", "semver", ">= 1.0.0, != 1.11.3", false},
		{"regexp", "${attr.kernel.version}", "regexp", "^6\\.", true},
		{"regexp no", "${attr.kernel.version}", "regexp", "^5\\.", false},
		{"regexp bad", "${attr.kernel.version}", "regexp", "(", false},
		{"set_contains", "${attr.tags}", "set_contains", "c,a", true},
		{"set_contains trims", "${attr.tags}", "set_contains", " b ", true},
		{"set_contains no", "${attr.tags}", "set_contains", "a,d", false},
		{"set_contains_all", "${attr.tags}", "set_contains_all", "a,b,c", true},
		{"set_contains_any", "${attr.tags}", "set_contains_any", "x,y,b", true},
		{"set_contains_any no", "${attr.tags}", "set_contains_any", "x,y", false},
		{"set_contains_any node ids", "${node.unique.id}", "set_contains_any", "n0,n1,n2,n3,n4,n5,n6,n7,n8,node-1", true},
		{"set_contains_any large no", "${node.unique.id}", "set_contains_any", "n0,n1,n2,n3,n4,n5,n6,n7,n8,n9", false},
		{"set missing", "${attr.missing}", "set_contains_any", "a", false},
		{"is_set", "${meta.rack}", "is_set", "", true},
		{"is_set missing", "${meta.nope}", "is_set", "", false},
		{"is_not_set", "${meta.nope}", "is_not_set", "", true},
		{"is_not_set set", "${attr.empty}", "is_not_set", "", false},
		{"interpolated right side", "${meta.rack}", "=", "${meta.rack}", true},
		{"interpolated regexp", "${node.datacenter}", "regexp", "${node.datacenter}", true},
		{"unknown operator", "${meta.rack}", "like", "r1", false},
		{"distinct_hosts is not a node constraint", "", "distinct_hosts", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := compile(&api.Constraint{LTarget: tc.l, Operand: tc.op, RTarget: tc.r})
			must.Eq(t, tc.want, k.holds(n))
		})
	}
}

// TestSemverParser mirrors helper/constraints/semver: strict semantic
// versions, the operators = != > < >= <= (none is =), spaces around them.
func TestSemverParser(t *testing.T) {
	cases := []struct {
		constraint, version string
		want                bool
	}{
		{">=1.0.0", "1.0.0", true},
		{"  >=  1.0.0  ", "1.0.1", true},
		{"=1.0.0", "1.0.0", true},
		{"!= 1.0.0", "1.0.0", false},
		{"> 1.0.0-alpha", "1.0.0", true},
		{"< 1.0.0", "1.0.0-rc.1", true},
		{"1.0", "1.0.0", true},
		{"=> 1.0.0", "1.0.0", false},
		{"", "1.0.0", false},
		{">= 1.0.0,", "1.0.0", false},
	}
	for _, tc := range cases {
		t.Run(tc.constraint, func(t *testing.T) {
			must.Eq(t, tc.want, parseSemver(tc.constraint).matches(tc.version))
		})
	}
}
