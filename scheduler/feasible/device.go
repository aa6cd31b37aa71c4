package feasible

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// GPUShare is the device every gpushare request names: "nvidia/gpushare",
// optionally followed by "/<model>".
const GPUShare = "nvidia/gpushare"

// DeviceIDs is the device target of a pin's share constraint: which shares
// are a placement core's matter, not a node's.
const DeviceIDs = "${device.ids}"

// deviceReq is a compiled device block of a task.
type deviceReq struct {
	vendor, typ, name string // Nomad's DeviceIdTuple of the request
	count             uint64
	// ours marks the gpushare request: only its constraints are checked
	// here (its count is in shares, which the placement core places).
	ours bool
	cons []*devConstraint
}

// compileDevice reads a device block as Nomad's RequestedDevice.ID does.
func compileDevice(d *api.RequestedDevice) *deviceReq {
	r := &deviceReq{count: 1, ours: d.Name == GPUShare || strings.HasPrefix(d.Name, GPUShare+"/")}
	if d.Count != nil {
		r.count = *d.Count
	}
	parts := strings.SplitN(d.Name, "/", 3)
	switch len(parts) {
	case 1:
		r.typ = parts[0]
	case 2:
		r.vendor, r.typ = parts[0], parts[1]
	default:
		r.vendor, r.typ, r.name = parts[0], parts[1], parts[2]
	}
	if r.ours && r.name != "" {
		// the pin writes the model as a regexp that per-GPU groups match
		// too (pin.ModelConstraint): the request is checked as pinned
		r.cons = append(r.cons, modelConstraint(r.name))
		r.name = ""
	}
	for _, c := range d.Constraints {
		if c == nil || (r.ours && (c.LTarget == DeviceIDs || c.RTarget == DeviceIDs)) {
			continue
		}
		if r.ours && c.LTarget == modelTarget && (c.Operand == "" || c.Operand == "=" || c.Operand == "==") {
			r.cons = append(r.cons, modelConstraint(c.RTarget))
			continue
		}
		r.cons = append(r.cons, compileDevConstraint(c))
	}
	return r
}

const modelTarget = "${device.model}"

// modelConstraint is a gpushare request's model as its pin writes it.
func modelConstraint(model string) *devConstraint {
	return compileDevConstraint(&api.Constraint{LTarget: modelTarget, Operand: OpRegexp, RTarget: devicefn.ModelPattern(model)})
}

// matchesID mirrors DeviceIdTuple.Matches: every part the request names
// is the device group's. A request without a name matches nothing.
func (r *deviceReq) matchesID(d *api.NodeDeviceResource) bool {
	if r.typ == "" && r.vendor == "" && r.name == "" {
		return false
	}
	return (r.name == "" || r.name == d.Name) && (r.vendor == "" || r.vendor == d.Vendor) && (r.typ == "" || r.typ == d.Type)
}

// matches mirrors nodeDeviceMatches: the ID and every constraint.
func (r *deviceReq) matches(d *api.NodeDeviceResource, m *memo) bool {
	if !r.matchesID(d) {
		return false
	}
	for _, c := range r.cons {
		if !c.holdsMemo(d, m) {
			return false
		}
	}
	return true
}

// devTarget is a compiled device constraint target.
type devTarget struct {
	kind uint8 // dLiteral, dIDs, dModel, dVendor, dType, dAttr, dUnknown
	key  string
	lit  value
}

const (
	dLiteral uint8 = iota
	dIDs
	dModel
	dVendor
	dType
	dAttr
	dUnknown
)

// parseDevTarget mirrors resolveDeviceTarget: a literal is parsed as an
// attribute (numbers with units, booleans, strings).
func parseDevTarget(s string) devTarget {
	if !strings.HasPrefix(s, "${") {
		return devTarget{kind: dLiteral, key: s, lit: parseValue(s)}
	}
	switch {
	case s == DeviceIDs:
		return devTarget{kind: dIDs}
	case s == "${device.model}":
		return devTarget{kind: dModel}
	case s == "${device.vendor}":
		return devTarget{kind: dVendor}
	case s == "${device.type}":
		return devTarget{kind: dType}
	case strings.HasPrefix(s, "${device.attr."):
		return devTarget{kind: dAttr, key: strings.TrimSuffix(strings.TrimPrefix(s, "${device.attr."), "}")}
	}
	return devTarget{kind: dUnknown}
}

func (t *devTarget) resolve(d *api.NodeDeviceResource) (value, bool) {
	switch t.kind {
	case dLiteral:
		return t.lit, true
	case dIDs:
		ids := make([]string, 0, len(d.Instances))
		for _, in := range d.Instances {
			if in != nil {
				ids = append(ids, in.ID)
			}
		}
		return stringValue(strings.Join(ids, ",")), true
	case dModel:
		return stringValue(d.Name), true
	case dVendor:
		return stringValue(d.Vendor), true
	case dType:
		return stringValue(d.Type), true
	case dAttr:
		a, ok := d.Attributes[t.key]
		return fromAPI(a), ok
	}
	return value{}, false
}

// devConstraint is a compiled device constraint.
type devConstraint struct {
	text string
	op   string
	l, r devTarget
	re   *regexp.Regexp // for a literal string right-hand side
	ver  verCheck
}

func compileDevConstraint(c *api.Constraint) *devConstraint {
	op := c.Operand
	if op == "" {
		op = "="
	}
	k := &devConstraint{text: c.LTarget + " " + op + " " + c.RTarget, op: op, l: parseDevTarget(c.LTarget), r: parseDevTarget(c.RTarget)}
	if k.r.kind == dLiteral && k.r.lit.hasString {
		switch op {
		case OpRegexp:
			k.re, _ = regexp.Compile(k.r.lit.s)
		case OpVersion:
			k.ver = parseVersion(k.r.lit.s)
		case OpSemver:
			k.ver = parseSemver(k.r.lit.s)
		}
	}
	return k
}

func (k *devConstraint) holds(d *api.NodeDeviceResource) bool {
	l, lok := k.l.resolve(d)
	r, rok := k.r.resolve(d)
	return k.check(&l, &r, lok, rok)
}

// holdsMemo is holds, remembered per left-hand string for the costly
// operators (version, semver, regexp) with a literal right-hand side.
func (k *devConstraint) holdsMemo(d *api.NodeDeviceResource, m *memo) bool {
	if m == nil || k.r.kind != dLiteral || (k.op != OpVersion && k.op != OpSemver && k.op != OpRegexp) {
		return k.holds(d)
	}
	l, lok := k.l.resolve(d)
	if !lok || !l.hasString || l.hasBool {
		return k.holds(d)
	}
	key := memoKey{k, l.s}
	if v, ok := (*m)[key]; ok {
		return v
	}
	v := k.check(&l, &k.r.lit, lok, true)
	if *m == nil {
		*m = memo{}
	}
	(*m)[key] = v
	return v
}

// check mirrors checkAttributeConstraint (scheduler/feasible/feasible.go).
func (k *devConstraint) check(l, r *value, lok, rok bool) bool {
	switch k.op {
	case OpDistinctHosts, OpDistinctProperty:
		return true
	case "!=", "not":
		if !lok && !rok {
			return false
		}
		if lok != rok {
			return true
		}
		c, ok := l.compare(r)
		return ok && c != 0
	case "<", "<=", ">", ">=", "=", "==", "is":
		if !lok || !rok {
			return false
		}
		c, ok := l.compare(r)
		if !ok {
			return false
		}
		switch k.op {
		case "<":
			return c == -1
		case "<=":
			return c != 1
		case ">":
			return c == 1
		case ">=":
			return c != -1
		}
		return c == 0
	case OpVersion, OpSemver:
		if !lok || !rok || !r.hasString {
			return false
		}
		var ls string
		switch {
		case l.hasString:
			ls = l.s
		case l.hasInt:
			ls = strconv.FormatInt(l.i, 10)
		default:
			return false
		}
		vc := k.ver
		if k.r.kind != dLiteral {
			vc = parseVersion(r.s)
			if k.op == OpSemver {
				vc = parseSemver(r.s)
			}
		}
		return vc.matches(ls)
	case OpRegexp:
		if !lok || !rok || !l.hasString || !r.hasString {
			return false
		}
		re := k.re
		if k.r.kind != dLiteral {
			re, _ = regexp.Compile(r.s)
		}
		return re != nil && re.MatchString(l.s)
	case OpSetContains, OpSetContainsAll:
		if !lok || !rok || !l.hasString || !r.hasString {
			return false
		}
		return containsAll(l.s, splitTrim(r.s))
	case OpSetContainsAny:
		if !lok || !rok || !l.hasString || !r.hasString {
			return false
		}
		return containsAny(l.s, splitTrim(r.s), nil)
	case OpIsSet:
		return lok
	case OpIsNotSet:
		return !lok
	}
	return false
}

// devicesFit mirrors DeviceChecker.hasDevices for the requests other than
// gpushare's: each needs Count healthy instances among the device groups
// that match it, instances taken by one request not counted for the next.
// The gpushare request needs one device group matching its constraints.
func devicesFit(reqs []*deviceReq, n *api.Node, m *memo) bool {
	if len(reqs) == 0 {
		return true
	}
	if n.NodeResources == nil || len(n.NodeResources.Devices) == 0 {
		return false
	}
	devs := n.NodeResources.Devices
	var taken [16]uint64
	var used []uint64
	if len(devs) <= len(taken) {
		used = taken[:len(devs)]
	} else {
		used = make([]uint64, len(devs))
	}
	for _, r := range reqs {
		if r.ours {
			ok := false
			for _, d := range devs {
				if d != nil && r.matches(d, m) {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
			continue
		}
		want, ok := r.count, false
		for i, d := range devs {
			if d == nil {
				continue
			}
			var healthy uint64
			for _, in := range d.Instances {
				if in != nil && in.Healthy {
					healthy++
				}
			}
			free := healthy - min(healthy, used[i])
			if free == 0 || !r.matches(d, m) {
				continue
			}
			take := min(free, want)
			used[i] += take
			want -= take
			if want == 0 {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// GPUShareGroups splits the node's nvidia/gpushare device groups by name
// into those the group's gpushare request matches (its device name and
// every constraint of its device block, as Nomad checks them) and the
// others. Both are nil when the group asks for no shares. A node passes
// when one group matches, but Nomad then takes the shares from a matching
// group only: the placement core must choose among those (a device block
// constrained to ${device.attr.mig_profile} = "3g.20gb" on a node of
// several MIG profiles, or to a memory size on a node of two models).
//
// The names are the placement core's: a node whose plugin offers each GPU
// as a group of its own (device_groups = "gpu") is named by model, the
// model matching when every one of its GPUs' groups matches, and counted
// among the others otherwise (the core cannot place on some GPUs of a
// model only).
func (c *Check) GPUShareGroups(n *api.Node) (match, other []string) {
	if n == nil || n.NodeResources == nil {
		return nil, nil
	}
	for _, r := range c.r.devices {
		if !r.ours {
			continue
		}
		var perGPU map[string]bool // model -> every GPU's group matches
		var models []string
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor+"/"+d.Type != GPUShare {
				continue
			}
			ok := r.matches(d, &c.memo)
			if model, per := deviceModel(d); per {
				if perGPU == nil {
					perGPU = map[string]bool{}
				}
				if all, seen := perGPU[model]; seen {
					perGPU[model] = all && ok
				} else {
					perGPU[model] = ok
					models = append(models, model)
				}
				continue
			}
			if ok {
				match = append(match, d.Name)
			} else {
				other = append(other, d.Name)
			}
		}
		for _, m := range models {
			if perGPU[m] {
				match = append(match, m)
			} else {
				other = append(other, m)
			}
		}
		return match, other
	}
	return nil, nil
}

// deviceModel is the model of a per-GPU gpushare group (per: it carries
// the GPU's index and model), or the device's name.
func deviceModel(d *api.NodeDeviceResource) (model string, per bool) {
	if _, ok := d.Attributes[devicefn.AttrGPUIndex]; ok {
		if a := d.Attributes[devicefn.AttrModel]; a != nil && a.StringVal != nil {
			return *a.StringVal, true
		}
	}
	return d.Name, false
}
