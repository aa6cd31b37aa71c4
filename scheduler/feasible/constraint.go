package feasible

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/nomad/api"
)

// Constraint operators, as Nomad names them (nomad/structs Constraint*).
const (
	OpDistinctHosts    = "distinct_hosts"
	OpDistinctProperty = "distinct_property"
	OpRegexp           = "regexp"
	OpVersion          = "version"
	OpSemver           = "semver"
	OpSetContains      = "set_contains"
	OpSetContainsAll   = "set_contains_all"
	OpSetContainsAny   = "set_contains_any"
	OpIsSet            = "is_set"
	OpIsNotSet         = "is_not_set"
)

// targetKind is what a constraint target interpolates.
type targetKind uint8

const (
	tLiteral targetKind = iota
	tNodeID
	tDatacenter
	tNodeName
	tNodeClass
	tNodePool
	tAttr
	tMeta
	tUnknown // "${...}" Nomad does not know: never found
)

// target is a compiled constraint target.
type target struct {
	kind targetKind
	key  string // the literal, or the attribute or meta key
}

// parseTarget compiles a target as Nomad's resolveTarget reads it
// (scheduler/feasible/feasible.go): no "${" prefix is a literal; the node
// fields, ${attr.*} and ${meta.*} are interpolated; any other "${" is not
// found (there is no ${node.region} on a node).
func parseTarget(s string) target {
	if !strings.HasPrefix(s, "${") {
		return target{kind: tLiteral, key: s}
	}
	switch {
	case s == "${node.unique.id}":
		return target{kind: tNodeID}
	case s == "${node.datacenter}":
		return target{kind: tDatacenter}
	case s == "${node.unique.name}":
		return target{kind: tNodeName}
	case s == "${node.class}":
		return target{kind: tNodeClass}
	case s == "${node.pool}":
		return target{kind: tNodePool}
	case strings.HasPrefix(s, "${attr."):
		return target{kind: tAttr, key: strings.TrimSuffix(strings.TrimPrefix(s, "${attr."), "}")}
	case strings.HasPrefix(s, "${meta."):
		return target{kind: tMeta, key: strings.TrimSuffix(strings.TrimPrefix(s, "${meta."), "}")}
	}
	return target{kind: tUnknown}
}

// resolve returns the target's value on node n, and whether it is set.
func (t target) resolve(n *api.Node) (string, bool) {
	switch t.kind {
	case tLiteral:
		return t.key, true
	case tNodeID:
		return n.ID, true
	case tDatacenter:
		return n.Datacenter, true
	case tNodeName:
		return n.Name, true
	case tNodeClass:
		return n.NodeClass, true
	case tNodePool:
		return n.NodePool, true
	case tAttr:
		v, ok := n.Attributes[t.key]
		return v, ok
	case tMeta:
		v, ok := n.Meta[t.key]
		return v, ok
	}
	return "", false
}

// constraint is a compiled node constraint.
type constraint struct {
	text string // as Nomad prints it: "<LTarget> <Operand> <RTarget>"
	op   string
	l, r target
	// compiled once when the right-hand side is a literal (rLit); costly
	// marks the operators whose answer a Check remembers per left value
	rLit   bool
	costly bool
	re     *regexp.Regexp
	ver    verCheck
	items  []string            // the right-hand set, trimmed
	set    map[string]struct{} // the same, for large sets
}

// compile compiles a node constraint. An empty operator is "=" (the
// jobspec's default; Nomad refuses a job without one).
func compile(c *api.Constraint) *constraint {
	op := c.Operand
	if op == "" {
		op = "="
	}
	k := &constraint{text: c.LTarget + " " + op + " " + c.RTarget, op: op, l: parseTarget(c.LTarget), r: parseTarget(c.RTarget)}
	if k.r.kind != tLiteral {
		return k
	}
	k.rLit = true
	k.costly = op == OpRegexp || op == OpVersion || op == OpSemver
	switch op {
	case OpRegexp:
		k.re, _ = regexp.Compile(k.r.key)
	case OpVersion:
		k.ver = parseVersion(k.r.key)
	case OpSemver:
		k.ver = parseSemver(k.r.key)
	case OpSetContains, OpSetContainsAll, OpSetContainsAny:
		for it := range strings.SplitSeq(k.r.key, ",") {
			k.items = append(k.items, strings.TrimSpace(it))
		}
		if len(k.items) > 8 {
			k.set = make(map[string]struct{}, len(k.items))
			for _, it := range k.items {
				k.set[it] = struct{}{}
			}
		}
	}
	return k
}

// holds reports whether node n meets the constraint, as Nomad's
// ConstraintChecker.meetsConstraint and checkConstraint do.
func (k *constraint) holds(n *api.Node) bool {
	l, lok := k.l.resolve(n)
	r, rok := k.r.resolve(n)
	return k.check(l, r, lok, rok)
}

// memo remembers the answers of costly constraints (version parsing,
// regular expressions) per left-hand value, for one Check: the nodes of a
// cluster share a few kernel, driver and Nomad versions.
type memo map[memoKey]bool

type memoKey struct {
	k any
	l string
}

// holdsMemo is holds, remembered for costly constraints.
func (k *constraint) holdsMemo(n *api.Node, m *memo) bool {
	if !k.costly {
		return k.holds(n)
	}
	l, lok := k.l.resolve(n)
	if !lok {
		return false // every costly operator needs both sides
	}
	key := memoKey{k, l}
	if v, ok := (*m)[key]; ok {
		return v
	}
	v := k.check(l, k.r.key, true, true)
	if *m == nil {
		*m = memo{}
	}
	(*m)[key] = v
	return v
}

// check mirrors checkConstraint (scheduler/feasible/feasible.go) on the
// resolved targets; unknown operators never hold.
func (k *constraint) check(l, r string, lok, rok bool) bool {
	switch k.op {
	case OpDistinctHosts, OpDistinctProperty:
		return true // their own iterators
	case "=", "==", "is":
		return lok && rok && l == r
	case "!=", "not":
		return l != r
	case "<", "<=", ">", ">=":
		return lok && rok && checkOrder(k.op, l, r)
	case OpIsSet:
		return lok
	case OpIsNotSet:
		return !lok
	case OpVersion, OpSemver:
		if !lok || !rok {
			return false
		}
		vc := k.ver
		if !k.rLit {
			vc = parseVersion(r)
			if k.op == OpSemver {
				vc = parseSemver(r)
			}
		}
		return vc.matches(l)
	case OpRegexp:
		if !lok || !rok {
			return false
		}
		re := k.re
		if !k.rLit {
			re, _ = regexp.Compile(r)
		}
		return re != nil && re.MatchString(l)
	case OpSetContains, OpSetContainsAll:
		if !lok || !rok {
			return false
		}
		if !k.rLit {
			return containsAll(l, splitTrim(r))
		}
		return containsAll(l, k.items)
	case OpSetContainsAny:
		if !lok || !rok {
			return false
		}
		if !k.rLit {
			return containsAny(l, splitTrim(r), nil)
		}
		return containsAny(l, k.items, k.set)
	}
	return false
}

func splitTrim(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// containsAll mirrors checkSetContainsAll: every item is one of the
// comma-separated, trimmed values of l.
func containsAll(l string, items []string) bool {
	for _, want := range items {
		found := false
		for v := range strings.SplitSeq(l, ",") {
			if strings.TrimSpace(v) == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// containsAny mirrors checkSetContainsAny: some item is one of the
// comma-separated, trimmed values of l. set, when not nil, holds items.
func containsAny(l string, items []string, set map[string]struct{}) bool {
	for v := range strings.SplitSeq(l, ",") {
		v = strings.TrimSpace(v)
		if set != nil {
			if _, ok := set[v]; ok {
				return true
			}
			continue
		}
		for _, it := range items {
			if it == v {
				return true
			}
		}
	}
	return false
}

// checkOrder mirrors Nomad's checkOrder: as integers when both parse, else
// as floats when both parse, else lexically.
func checkOrder(op, l, r string) bool {
	if a, err := strconv.ParseInt(l, 10, 64); err == nil {
		if b, err := strconv.ParseInt(r, 10, 64); err == nil {
			return compareOrder(op, cmpOrdered(a, b))
		}
	}
	if a, err := strconv.ParseFloat(l, 64); err == nil {
		if b, err := strconv.ParseFloat(r, 64); err == nil {
			if a != a || b != b { // NaN: every comparison is false
				return false
			}
			return compareOrder(op, cmpOrdered(a, b))
		}
	}
	return compareOrder(op, strings.Compare(l, r))
}

func cmpOrdered[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareOrder(op string, c int) bool {
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// verCheck is a parsed version or semver constraint; nil when it does not
// parse (then nothing matches, as in Nomad).
type verCheck func(v *version.Version) bool

// matches mirrors checkVersionMatch: the left side must parse as a
// version (go-version's lenient form, for both operators).
func (vc verCheck) matches(l string) bool {
	if vc == nil {
		return false
	}
	v, err := version.NewVersion(l)
	if err != nil {
		return false
	}
	return vc(v)
}

// parseVersion is the "version" operator: go-version's constraints.
func parseVersion(s string) verCheck {
	c, err := version.NewConstraint(s)
	if err != nil {
		return nil
	}
	return c.Check
}

// semverOps are the operators of Nomad's semver constraints
// (helper/constraints/semver), two-character ones first.
var semverOps = []string{">=", "<=", "!=", ">", "<", "="}

// reSpace is what \s matches in RE2, the spaces Nomad's semver parser allows.
const reSpace = "\t\n\f\r "

// parseSemver is the "semver" operator as Nomad's helper/constraints/semver
// reads it: comma-separated "<op> <version>" with op one of = != > < >= <=
// (none is =), each version a strict semantic version, compared with
// Semver 2.0 precedence.
func parseSemver(s string) verCheck {
	type one struct {
		op string
		v  *version.Version
	}
	var cs []one
	for single := range strings.SplitSeq(s, ",") {
		single = strings.TrimLeft(single, reSpace)
		op := ""
		for _, o := range semverOps {
			if strings.HasPrefix(single, o) {
				op = o
				break
			}
		}
		rest := strings.Trim(single[len(op):], reSpace)
		v, err := version.NewSemver(rest)
		if err != nil {
			return nil
		}
		cs = append(cs, one{op, v})
	}
	return func(v *version.Version) bool {
		for _, c := range cs {
			cmp := v.Compare(c.v)
			ok := false
			switch c.op {
			case "", "=":
				ok = v.Equal(c.v)
			case "!=":
				ok = !v.Equal(c.v)
			case ">":
				ok = cmp == 1
			case "<":
				ok = cmp == -1
			case ">=":
				ok = cmp >= 0
			case "<=":
				ok = cmp <= 0
			}
			if !ok {
				return false
			}
		}
		return true
	}
}
