package feasible

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/ryanuber/go-glob"
)

// Why a node is not feasible for a group: Nomad's filter names
// (scheduler/feasible FilterConstraint*) where it has one. A constraint
// that fails is named by ReasonConstraint, distinct_property by Nomad's
// own messages ("distinct_property: <target>=<value> used by <n> allocs",
// "missing property ...").
const (
	FilterDatacenter    = "missing compatible datacenter"
	FilterNodePool      = "node pool"
	FilterDrivers       = "missing drivers"
	FilterDevices       = "missing devices"
	FilterHostVolumes   = "missing compatible host volumes"
	FilterDistinctHosts = "distinct_hosts"
)

// ReasonConstraint names a failed constraint: "constraint " and the
// constraint as Nomad prints it, "${attr.kernel.name} = plan9".
func ReasonConstraint(text string) string { return "constraint " + text }

// ErrNoGroup is returned for a group the job does not have.
var ErrNoGroup = errors.New("no such task group")

// Level is where a constraint sits in the job.
type Level uint8

// Levels of constraints.
const (
	LevelJob Level = iota
	LevelGroup
	LevelTask
)

// Skip leaves a constraint out of the rules (the gpushare gate, which no
// node meets by design, and a pin's own node constraint, which the next
// pin replaces). Nil skips nothing.
type Skip func(level Level, c *api.Constraint) bool

// Rules are a group's feasibility rules, compiled from one version of its
// job. They are read-only once compiled and safe to share.
type Rules struct {
	group       string
	datacenters []string
	pool        string
	job, tg     []*constraint // job level; group and task level
	drivers     []string
	devices     []*deviceReq
	volumes     []volumeReq
	// distinct_hosts at job and group level (DistinctHostsIterator)
	jobHosts, groupHosts bool
	props                []propRule
	key                  string
}

// volumeReq is a host volume the group mounts.
type volumeReq struct {
	sources  []string // one per allocation index for per_alloc
	readOnly bool
}

// propRule is one distinct_property constraint.
type propRule struct {
	target  target
	text    string // the LTarget
	allowed uint64
	group   bool   // counts the group's allocations only
	err     string // an RTarget Nomad cannot read fails every node
}

// Compile compiles the rules of group in job, as Nomad's generic stack
// reads them (GenericStack.SetJob and Select, TaskGroupConstraints).
func Compile(job *api.Job, group string, skip Skip) (*Rules, error) {
	var tg *api.TaskGroup
	for _, g := range job.TaskGroups {
		if g != nil && g.Name != nil && *g.Name == group {
			tg = g
		}
	}
	if tg == nil {
		return nil, fmt.Errorf("%w %q in job %q", ErrNoGroup, group, deref(job.ID))
	}
	r := &Rules{group: group, datacenters: job.Datacenters, pool: deref(job.NodePool)}
	if len(r.datacenters) == 0 {
		r.datacenters = []string{"*"} // Job.Canonicalize
	}
	if r.pool == "" {
		r.pool = "default" // what the job endpoint sets when the namespace names no pool
	}
	add := func(dst []*constraint, level Level, cs []*api.Constraint) []*constraint {
		for _, c := range cs {
			if c == nil || (skip != nil && skip(level, c)) {
				continue
			}
			if c.Operand == OpDistinctHosts || c.Operand == OpDistinctProperty {
				continue // their own iterators, at job and group level only
			}
			dst = append(dst, compile(c))
		}
		return dst
	}
	r.job = add(nil, LevelJob, job.Constraints)
	r.tg = add(nil, LevelGroup, tg.Constraints)
	count := 1
	if tg.Count != nil {
		count = *tg.Count
	}
	for _, t := range tg.Tasks {
		if t == nil {
			continue
		}
		r.tg = add(r.tg, LevelTask, t.Constraints)
		// a job Nomad accepted names a driver for every task; one without
		// (a test's job) asks for none
		if t.Driver != "" && !slices.Contains(r.drivers, t.Driver) {
			r.drivers = append(r.drivers, t.Driver)
		}
		if t.Resources != nil {
			for _, d := range t.Resources.Devices {
				if d != nil {
					r.devices = append(r.devices, compileDevice(d))
				}
			}
		}
	}
	slices.Sort(r.drivers)
	for _, name := range sortedKeys(tg.Volumes) {
		v := tg.Volumes[name]
		if v == nil || v.Type != "host" {
			continue // CSI volumes are not checked here
		}
		vr := volumeReq{readOnly: v.ReadOnly, sources: []string{v.Source}}
		if v.PerAlloc {
			vr.sources = nil
			for i := range max(count, 1) {
				vr.sources = append(vr.sources, v.Source+"["+strconv.Itoa(i)+"]")
			}
		}
		r.volumes = append(r.volumes, vr)
	}
	r.jobHosts = distinctHosts(job.Constraints, LevelJob, skip)
	r.groupHosts = distinctHosts(tg.Constraints, LevelGroup, skip)
	r.props = append(props(job.Constraints, LevelJob, skip, false), props(tg.Constraints, LevelGroup, skip, true)...)
	if !r.DistinctHosts() && len(r.props) == 0 {
		r.key = r.describe()
	}
	return r, nil
}

// describe spells out every rule that decides on a node alone.
func (r *Rules) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dc=%q pool=%q drivers=%q", r.datacenters, r.pool, r.drivers)
	for _, k := range r.job {
		fmt.Fprintf(&b, " job:%q", k.text)
	}
	for _, k := range r.tg {
		fmt.Fprintf(&b, " group:%q", k.text)
	}
	for _, d := range r.devices {
		fmt.Fprintf(&b, " device:%q/%q/%q", d.vendor, d.typ, d.name)
		if !d.ours {
			fmt.Fprintf(&b, "x%d", d.count)
		}
		for _, c := range d.cons {
			fmt.Fprintf(&b, ",%q", c.text)
		}
	}
	for _, v := range r.volumes {
		fmt.Fprintf(&b, " volume:%q,%v", v.sources, v.readOnly)
	}
	return b.String()
}

// Key is the same for two groups whose rules allow the same nodes whatever
// the allocations (their datacenters, pool, constraints, drivers, devices
// and volumes are the same), and "" for rules that also depend on the
// job's allocations (distinct_hosts, distinct_property): a pass may share
// the nodes one group's rules allow with every group of the same key.
func (r *Rules) Key() string { return r.key }

// distinctHosts mirrors hasDistinctHostsConstraint: the first
// distinct_hosts constraint decides; an empty or unreadable value is true.
func distinctHosts(cs []*api.Constraint, level Level, skip Skip) bool {
	for _, c := range cs {
		if c == nil || c.Operand != OpDistinctHosts || (skip != nil && skip(level, c)) {
			continue
		}
		if c.RTarget == "" {
			return true
		}
		on, err := strconv.ParseBool(c.RTarget)
		return err != nil || on
	}
	return false
}

// props mirrors propertySet.setConstraint: the allowed count is RTarget,
// 1 when empty.
func props(cs []*api.Constraint, level Level, skip Skip, group bool) []propRule {
	var out []propRule
	for _, c := range cs {
		if c == nil || c.Operand != OpDistinctProperty || (skip != nil && skip(level, c)) {
			continue
		}
		p := propRule{target: parseTarget(c.LTarget), text: c.LTarget, allowed: 1, group: group}
		if c.RTarget != "" {
			n, err := strconv.ParseUint(c.RTarget, 10, 64)
			if err != nil {
				p.err = fmt.Sprintf("failed to convert RTarget %q to uint64: %v", c.RTarget, err)
			}
			p.allowed = n
		}
		out = append(out, p)
	}
	return out
}

// DistinctHosts reports whether the group's allocations must each have a
// node of their own (distinct_hosts at job or group level).
func (r *Rules) DistinctHosts() bool { return r.jobHosts || r.groupHosts }

// JobDistinctHosts reports whether the job's groups must not share a node
// (distinct_hosts at job level).
func (r *Rules) JobDistinctHosts() bool { return r.jobHosts }

// Alloc is a live allocation of the job: its group and the node it is on
// (Node may be nil when the node is not known; it then counts for
// distinct_hosts but has no property).
type Alloc struct {
	Group  string
	NodeID string
	Node   *api.Node
}

// Check is a group's rules against the live allocations of its job, ready
// to be asked about many nodes.
type Check struct {
	r       *Rules
	jobOn   map[string]bool // nodes with an allocation of the job
	groupOn map[string]bool // nodes with an allocation of the group
	used    []map[string]uint64
	memo    memo
}

// With returns the rules checked against the job's live allocations.
// Leave out allocations the placement replaces (Nomad stops them in the
// same plan): a group being placed anew does not count its own.
func (r *Rules) With(allocs []Alloc) *Check {
	c := &Check{r: r}
	if r.DistinctHosts() && len(allocs) > 0 {
		c.jobOn, c.groupOn = map[string]bool{}, map[string]bool{}
		for _, a := range allocs {
			c.jobOn[a.NodeID] = true
			if a.Group == r.group {
				c.groupOn[a.NodeID] = true
			}
		}
	}
	for _, p := range r.props {
		used := map[string]uint64{}
		for _, a := range allocs {
			if (p.group && a.Group != r.group) || a.Node == nil {
				continue
			}
			if v, ok := p.target.resolve(a.Node); ok {
				used[v]++
			}
		}
		c.used = append(c.used, used)
	}
	return c
}

// Reason returns why Nomad would not find node n feasible for the group,
// or "" when it would. The checks run in the order of Nomad's generic
// stack, so the reason is the filter Nomad would count: datacenter and
// node pool, job constraints, drivers, group and task constraints,
// devices, host volumes, distinct_hosts, distinct_property.
func (c *Check) Reason(n *api.Node) string {
	r := c.r
	if !inAnyDC(r.datacenters, n.Datacenter) {
		return FilterDatacenter
	}
	if pool := n.NodePool; r.pool != "all" && r.pool != pool && (pool != "" || r.pool != "default") {
		return FilterNodePool
	}
	for _, k := range r.job {
		if !k.holdsMemo(n, &c.memo) {
			return ReasonConstraint(k.text)
		}
	}
	for _, d := range r.drivers {
		if !HasDriver(n, d) {
			return FilterDrivers
		}
	}
	for _, k := range r.tg {
		if !k.holdsMemo(n, &c.memo) {
			return ReasonConstraint(k.text)
		}
	}
	if !devicesFit(r.devices, n, &c.memo) {
		return FilterDevices
	}
	if !hasVolumes(r.volumes, n) {
		return FilterHostVolumes
	}
	if c.jobOn != nil && (r.jobHosts && c.jobOn[n.ID] || c.groupOn[n.ID]) {
		return FilterDistinctHosts
	}
	for i, p := range r.props {
		if p.err != "" {
			return p.err
		}
		v, ok := p.target.resolve(n)
		if !ok {
			return fmt.Sprintf("missing property %q", p.text)
		}
		if used := c.used[i][v]; used >= p.allowed {
			return fmt.Sprintf("distinct_property: %s=%s used by %d allocs", p.text, v, used)
		}
	}
	return ""
}

// Feasible is Reason for one node: compile, check, answer.
func Feasible(job *api.Job, group string, n *api.Node, allocs []Alloc, skip Skip) (string, error) {
	r, err := Compile(job, group, skip)
	if err != nil {
		return "", err
	}
	return r.With(allocs).Reason(n), nil
}

// inAnyDC mirrors Node.IsInAnyDC: glob patterns ("*" anywhere).
func inAnyDC(patterns []string, dc string) bool {
	for _, p := range patterns {
		if p == dc || p == "*" || strings.Contains(p, "*") && glob.Glob(p, dc) {
			return true
		}
	}
	return false
}

// HasDriver mirrors Nomad's DriverChecker.hasDrivers: the node's driver
// info when it has one (detected and healthy), else its "driver.<name>"
// attribute read as a boolean.
func HasDriver(n *api.Node, name string) bool {
	if info, ok := n.Drivers[name]; ok {
		return info != nil && info.Detected && info.Healthy
	}
	v, ok := n.Attributes["driver."+name]
	if !ok {
		return false
	}
	on, err := strconv.ParseBool(v)
	return err == nil && on
}

// hasVolumes mirrors HostVolumeChecker.hasVolumes for what the node
// reports: the source must be among its host volumes, and a static one
// configured read-only takes only read-only mounts. Dynamic volumes (with
// an ID) are taken as available: their state, capabilities and claims are
// in Nomad's volume API, not on the node. A per_alloc volume needs the
// source of one of the group's allocation indexes.
func hasVolumes(reqs []volumeReq, n *api.Node) bool {
	for _, v := range reqs {
		ok := false
		for _, src := range v.sources {
			info, found := n.HostVolumes[src]
			if found && (info == nil || info.ID != "" || v.readOnly || !info.ReadOnly) {
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// PropertyLimit is one distinct_property rule of the group for placing
// several of its allocations at once: Of is each node's value of the
// property (nodes without one are left out), Left how many more
// allocations each value used by the job's live allocations takes, Max
// how many a value takes that none uses.
type PropertyLimit struct {
	Property string
	Of       map[string]string
	Left     map[string]int
	Max      int
}

// PropertyLimits returns the group's distinct_property rules over nodes,
// as the allocations passed to With leave them. A rule Nomad cannot read
// is left out: it already fails every node (Reason).
func (c *Check) PropertyLimits(nodes []*api.Node) []PropertyLimit {
	var out []PropertyLimit
	for i, p := range c.r.props {
		if p.err != "" {
			continue
		}
		l := PropertyLimit{Property: p.text, Of: map[string]string{}, Left: map[string]int{}, Max: int(min(p.allowed, uint64(MaxLimit)))}
		for _, n := range nodes {
			if n == nil {
				continue
			}
			if v, ok := p.target.resolve(n); ok {
				l.Of[n.ID] = v
			}
		}
		for v, used := range c.used[i] {
			l.Left[v] = int(min(p.allowed-min(used, p.allowed), uint64(MaxLimit)))
		}
		out = append(out, l)
	}
	return out
}

// MaxLimit bounds a distinct_property limit as PropertyLimits returns it
// (a larger one limits nothing a group could place).
const MaxLimit = 1 << 20
