package feasible

import (
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/hashicorp/nomad/api"
)

// value is a device attribute as Nomad compares it (plugins/shared/structs
// Attribute), held by value so that resolving one allocates nothing. More
// than one field may be set (an attribute the API decoded so); the order
// in which they are read is Nomad's.
type value struct {
	hasInt, hasFloat, hasString, hasBool bool

	i    int64
	f    float64
	s    string
	b    bool
	unit string
}

func stringValue(s string) value { return value{hasString: true, s: s} }

// fromAPI converts a node's device attribute; nil is an attribute with no
// value, which compares with nothing.
func fromAPI(a *api.Attribute) value {
	var v value
	if a == nil {
		return v
	}
	if a.IntVal != nil {
		v.hasInt, v.i = true, *a.IntVal
	}
	if a.FloatVal != nil {
		v.hasFloat, v.f = true, *a.FloatVal
	}
	if a.StringVal != nil {
		v.hasString, v.s = true, *a.StringVal
	}
	if a.BoolVal != nil {
		v.hasBool, v.b = true, *a.BoolVal
	}
	v.unit = a.Unit
	return v
}

// unit is a unit of a numeric attribute: its base (units of one base
// compare) and its factor over the base (divided by it when inverse).
type unit struct {
	base    uint8
	factor  int64
	inverse bool
}

// Bases of units.
const (
	baseByte uint8 = iota + 1
	baseByteRate
	baseHertz
	baseWatt
)

// units are the units Nomad knows for device attributes.
var units = func() map[string]unit {
	m := map[string]unit{"MHz": {baseHertz, 1e6, false}, "GHz": {baseHertz, 1e9, false},
		"mW": {baseWatt, 1e3, true}, "W": {baseWatt, 1, false}, "kW": {baseWatt, 1e3, false}, "MW": {baseWatt, 1e6, false}, "GW": {baseWatt, 1e9, false}}
	for i, p := range []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"} {
		m[p+"B"] = unit{baseByte, 1 << (10 * (i + 1)), false}
		m[p+"B/s"] = unit{baseByteRate, 1 << (10 * (i + 1)), false}
	}
	dec := int64(1)
	for _, p := range []string{"k", "M", "G", "T", "P", "E"} {
		dec *= 1000
		m[p+"B"] = unit{baseByte, dec, false}
		m[p+"B/s"] = unit{baseByteRate, dec, false}
	}
	m["KB"], m["KB/s"] = m["kB"], m["kB/s"]
	return m
}()

// unitNames are the unit names, longest first, for suffix matching.
var unitNames = func() []string {
	var out []string
	for n := range units {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return out
}()

// parseValue reads a literal the way Nomad's ParseAttribute does: a number
// with an optional known unit suffix, else a boolean, else a string.
func parseValue(in string) value {
	if in == "" {
		return stringValue(in)
	}
	numeric, u := in, ""
	if unicode.IsLetter(rune(in[len(in)-1])) {
		for _, n := range unitNames {
			if strings.HasSuffix(in, n) {
				u = n
				break
			}
		}
		if u != "" {
			numeric = strings.TrimSpace(strings.TrimSuffix(in, u))
		}
	}
	if i, err := strconv.ParseInt(numeric, 10, 64); err == nil {
		return value{hasInt: true, i: i, unit: u}
	}
	if f, err := strconv.ParseFloat(numeric, 64); err == nil {
		return value{hasFloat: true, f: f, unit: u}
	}
	if b, err := strconv.ParseBool(in); err == nil {
		return value{hasBool: true, b: b}
	}
	return stringValue(in)
}

func (v *value) typedUnit() (unit, bool) {
	u, ok := units[v.unit]
	return u, ok
}

// comparable mirrors Attribute.Comparable: known units of one base
// compare; a unit on one side only does not; then strings with strings,
// booleans with booleans, and numbers (or nothing) with anything.
func (v *value) comparable(o *value) bool {
	vu, vok := v.typedUnit()
	ou, ook := o.typedUnit()
	switch {
	case vok && ook:
		return vu.base == ou.base
	case vok != ook:
		return false
	case v.hasString:
		return o.hasString
	case v.hasBool:
		return o.hasBool
	}
	return true
}

// compare mirrors Attribute.Compare: -1, 0 or 1, and whether the two
// compare at all. Booleans are 0 when equal, else 1. A NaN compares with
// nothing (Nomad would panic in big.Float).
func (v *value) compare(o *value) (int, bool) {
	if !v.comparable(o) {
		return 0, false
	}
	switch {
	case v.hasBool:
		if v.b == o.b {
			return 0, true
		}
		return 1, true
	case v.hasString:
		return strings.Compare(v.s, o.s), true
	case v.hasInt || v.hasFloat:
		if v.hasInt && o.hasInt {
			return cmpOrdered(v.baseInt(), o.baseInt()), true
		}
		a, b := v.bigFloat(), o.bigFloat()
		if a == nil || b == nil {
			return 0, false
		}
		return a.Cmp(b), true
	}
	return 0, false
}

// baseInt is the integer in the base unit (wrapping on overflow as
// Nomad's getInt does).
func (v *value) baseInt() int64 {
	u, ok := v.typedUnit()
	switch {
	case !ok:
		return v.i
	case u.inverse:
		return v.i / u.factor
	}
	return v.i * u.factor
}

// precision is Nomad's floatPrecision.
const precision = 256

// bigFloat is the number in the base unit, at Nomad's precision; nil when
// the value is no number.
func (v *value) bigFloat() *big.Float {
	f := new(big.Float).SetPrec(precision)
	switch {
	case v.hasInt:
		f.SetInt64(v.i)
	case v.hasFloat:
		if math.IsNaN(v.f) {
			return nil
		}
		f.SetFloat64(v.f)
	default:
		return nil
	}
	u, ok := v.typedUnit()
	if !ok {
		return f
	}
	m := new(big.Float).SetPrec(precision).SetInt64(u.factor)
	if u.inverse {
		one := big.NewFloat(1.0).SetPrec(precision)
		m = m.Quo(one, m)
	}
	return f.Mul(f, m)
}
