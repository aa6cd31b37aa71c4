package pin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// The gate: a constraint no node satisfies, so Nomad waits for gpushare.
// It reads a node meta key no node sets. Not a unique attribute: Nomad
// counts a constraint on ${node.unique.*} as "escaped" from node classes,
// and runs every escaped blocked evaluation again each time capacity frees
// anywhere (each allocation that ends, each node update). Under churn that
// queue of re-evaluations, one per waiting group per event, delayed the
// evaluation of each pin by minutes. On a meta key, Nomad marks every node
// class ineligible once and leaves the group blocked until its job
// changes: the pin's registration.
const (
	GateAttribute = "${meta.gpushare_gate}"
	GateValue     = "pending"
)

// GateMetaKey is the node meta key the gate reads. No client may set it to
// GateValue: Nomad would place gated groups on that node by itself, past
// the scheduler (the service warns of such a node, OpensGate).
const GateMetaKey = "gpushare_gate"

// OpensGate reports whether a node with this meta satisfies the gate.
func OpensGate(meta map[string]string) bool { return meta[GateMetaKey] == GateValue }

// The gate written before: still recognised (Gated, the pin removes it,
// AddGate replaces it), never written.
const (
	LegacyGateAttribute = "${node.unique.id}"
	LegacyGateValue     = "gpushare:pending"
)

// DeviceName is what a task asks for: "nvidia/gpushare" or
// "nvidia/gpushare/<model>".
const DeviceName = devicefn.Vendor + "/" + devicefn.DeviceType

// migDeviceName is the device of MIG instances, which the scheduler does
// not place: Nomad does, by the device name.
const migDeviceName = devicefn.Vendor + "/" + devicefn.MIGDeviceType

// ErrNotPlaceable is wrapped by errors about a group that gpushare cannot
// turn into a request; the message says what to change in the jobspec.
var ErrNotPlaceable = errors.New("cannot place this group")

// isGate reports whether c is the gate constraint, as written now or before.
func isGate(c *api.Constraint) bool {
	return c != nil && isEquality(c.Operand) &&
		(c.LTarget == GateAttribute && c.RTarget == GateValue || IsLegacyGate(c))
}

// isEquality reports whether a constraint's operand is Nomad's equality
// ("" defaults to it).
func isEquality(op string) bool { return op == "" || op == "=" || op == "==" }

// IsLegacyGate reports whether c is the gate as written before
// (${node.unique.id} = gpushare:pending): it still holds the group, but
// Nomad re-evaluates the group each time capacity frees (see GateAttribute).
func IsLegacyGate(c *api.Constraint) bool {
	return c != nil && c.LTarget == LegacyGateAttribute && c.RTarget == LegacyGateValue && isEquality(c.Operand)
}

// Gate returns the gate constraint.
func Gate() *api.Constraint {
	return &api.Constraint{LTarget: GateAttribute, RTarget: GateValue, Operand: "="}
}

// Gated lists the groups of job that wait for gpushare: those with the gate
// in the group's constraints, or all groups when the gate is on the job.
func Gated(job *api.Job) []string {
	jobGate := slices.ContainsFunc(job.Constraints, isGate)
	var out []string
	for _, tg := range job.TaskGroups {
		if jobGate || slices.ContainsFunc(tg.Constraints, isGate) {
			out = append(out, *tg.Name)
		}
	}
	return out
}

// AddGate puts the gate on every group that asks for gpushare devices and
// is not gated yet; it returns the groups it gated. A gate written the old
// way (IsLegacyGate), on the job or a group, is replaced by today's, which
// Nomad does not re-evaluate on every freed allocation: a change of
// constraints Nomad applies in place.
func AddGate(job *api.Job) []string {
	for _, c := range job.Constraints {
		if IsLegacyGate(c) {
			*c = *Gate()
		}
	}
	var out []string
	for _, tg := range job.TaskGroups {
		for _, c := range tg.Constraints {
			if IsLegacyGate(c) {
				*c = *Gate()
			}
		}
		if slices.ContainsFunc(tg.Constraints, isGate) || deviceRequests(tg) == 0 {
			continue
		}
		tg.Constraints = append(tg.Constraints, Gate())
		out = append(out, *tg.Name)
	}
	return out
}

func deviceRequests(tg *api.TaskGroup) int {
	n := 0
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if isOurs(d.Name) {
				n++
			}
		}
	}
	return n
}

func isOurs(name string) bool {
	return name == DeviceName || strings.HasPrefix(name, DeviceName+"/")
}

// Group returns the task group with the given name.
func Group(job *api.Job, name string) *api.TaskGroup {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

// GroupKey names a group across the cluster: "<namespace>/<job>/<group>",
// each part escaped so that one key names one group (decide.Key.String).
func GroupKey(job *api.Job, group string) string {
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	return decide.Key{Namespace: ns, Job: *job.ID, Group: group}.String()
}

// Batch reports whether job is a batch or sysbatch job: its allocations
// end by themselves.
func Batch(job *api.Job) bool {
	return job.Type != nil && (*job.Type == api.JobTypeBatch || *job.Type == api.JobTypeSysbatch)
}

// Request turns a gated group into a placement request; named profiles are
// looked up in model (the service's configured and learned profiles).
// Errors wrap ErrNotPlaceable and say what to change.
func Request(job *api.Job, group string, model *interference.Model) (placement.Request, error) {
	tg := Group(job, group)
	if tg == nil {
		return placement.Request{}, fmt.Errorf("%w: job %q has no group %q", ErrNotPlaceable, *job.ID, group)
	}
	r := placement.Request{ID: GroupKey(job, group), Count: Count(tg)}
	r.Batch = Batch(job) // its allocations end by themselves: never staged
	// an older node pin's index affinities, kept for the group's life:
	// Nomad takes its GPUs by index, not in the node's cell order
	r.NomadIndexOrder = HasIndexAffinities(tg)
	rec, _ := ParseRecord(job, group)
	var devices int
	mig := ""
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		t = userTask(t, rec) // what a pin wrote read as the user's block
		if t.Resources.CPU != nil {
			r.Res.CPU += int64(*t.Resources.CPU)
		}
		if t.Resources.MemoryMB != nil {
			r.Res.MemoryMiB += int64(*t.Resources.MemoryMB)
		}
		for _, d := range t.Resources.Devices {
			if d.Name == migDeviceName || strings.HasPrefix(d.Name, migDeviceName+"/") {
				mig = d.Name
			}
		}
		// copies of one block (a pin's split, blocks.go) are one request
		d, shares, copies, ok := requestBlocks(t)
		switch {
		case !ok:
			devices += copies
			continue
		case d == nil:
			continue
		}
		devices++
		r.Shares = int(shares)
		if model, ok := strings.CutPrefix(d.Name, DeviceName+"/"); ok {
			r.Models = []string{model}
		}
		for _, c := range d.Constraints {
			if c.LTarget == ModelTarget && isEquality(c.Operand) {
				r.Models = []string{c.RTarget}
			}
		}
	}
	switch {
	case devices == 0 && mig != "":
		return r, fmt.Errorf("%w %q: it carries the gpushare gate but asks only for a MIG instance (%q), which Nomad places by itself; remove the gate", ErrNotPlaceable, r.ID, mig)
	case devices == 0:
		return r, fmt.Errorf("%w %q: it carries the gpushare gate but no task asks for a %q device; remove the gate or add a device block", ErrNotPlaceable, r.ID, DeviceName)
	case devices > 1:
		return r, fmt.Errorf("%w %q: %d device blocks ask for %q; gpushare places one GPU request per group: put the GPU work in one task", ErrNotPlaceable, r.ID, devices, DeviceName)
	case r.Shares == 0:
		// Nomad accepts the job and then blocks the group for ever
		// ("invalid request of zero devices"): a pin would only hide that
		return r, fmt.Errorf("%w %q: its %q device block asks for count = 0: Nomad cannot place a request of zero devices; ask for at least 1 share, or remove the device block and the gate", ErrNotPlaceable, r.ID, DeviceName)
	}
	meta := Meta(job, tg)
	if meta[MetaClass] == "normal" {
		delete(meta, MetaClass)
	}
	if c := meta[MetaClass]; c != "" && c != string(placement.ClassProduction) && c != string(placement.ClassOpportunistic) {
		return r, fmt.Errorf("%w %q: meta %s = %q: want %q or %q", ErrNotPlaceable, r.ID, MetaClass, c, placement.ClassProduction, placement.ClassOpportunistic)
	}
	if v := meta[MetaMaxSlowdown]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f >= 1 {
			return r, fmt.Errorf("%w %q: meta %s = %q: want a number between 0 and 1", ErrNotPlaceable, r.ID, MetaMaxSlowdown, v)
		}
		r.MaxSlowdown = f
	}
	if v := meta[MetaExpected]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return r, fmt.Errorf("%w %q: meta %s = %q: want a positive duration such as \"90m\" or \"6h\"", ErrNotPlaceable, r.ID, MetaExpected, v)
		}
		r.Expected = d
	}
	if model == nil {
		model = interference.Default()
	}
	if err := ApplyMeta(&r, meta, model); err != nil {
		return r, fmt.Errorf("%w %q: %w", ErrNotPlaceable, r.ID, err)
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%w: %v", ErrNotPlaceable, err)
	}
	return r, nil
}

// Record is the gpushare.placement meta of a pinned group: what the
// decision is, never why (the same decision writes the same meta, byte for
// byte, so that a group re-registered unchanged is updated in place).
type Record struct {
	// Contract is how the pin tells Nomad where to place: "" by node and
	// share (a ${device.ids} constraint in the device block; the record in
	// the group's meta), ContractNode by node alone, checked in place
	// (node.go).
	Contract string   `json:"contract,omitempty"`
	Nodes    []string `json:"nodes"`
	GPUs     []string `json:"gpus"`
	Shares   []string `json:"shares"`
	Cell     string   `json:"cell,omitempty"`
	Policy   string   `json:"policy"`
	// Class and VC are the group's gpushare.class and gpushare.vc the
	// placement was made for: a virtual cluster counts an allocation only
	// under a placement signed for it.
	Class string `json:"class,omitempty"`
	VC    string `json:"vc,omitempty"`
	// Request is the Digest of everything the decision depended on.
	Request string `json:"request,omitempty"`
	// Count is how many allocations the pin names shares for (0 in pins
	// written before it was recorded). A group scaled since (nomad job
	// scale, the Autoscaler) keeps a pin made for another count: it is the
	// same request, with more or fewer allocations (see ForRequest).
	Count int `json:"count,omitempty"`
	// PerNode, in a node pin of a group whose replicas spread, is the most
	// allocations the decision put on one node: the pin limits each node
	// to as many (perNodeConstraint), so that Nomad places a scale past
	// the pin nowhere rather than stacking it on the pinned nodes; the
	// scheduler then decides it, keeping what runs. 0: no limit (a pin
	// written before it, a packed group, a group that deploys canaries).
	PerNode int `json:"per_node,omitempty"`
	// Blocks, in a pin of allocations of several GPUs each on nodes whose
	// GPUs are each a device group of their own (placement.Decision.InPlace),
	// is how many device blocks of one GPU's shares the group's GPU
	// request was split into (setBlocks; blocks.go): one per GPU. With a
	// share pin (a parameterized job's) each block carries the share
	// list, and takes one of the GPUs it names. 0: one block.
	Blocks int `json:"blocks,omitempty"`
	// Model, when the group asks for a GPU model, is that model, which the
	// pin wrote as ModelConstraint (models.go: it matches the model's
	// GPUs whether the plugin offers one device group per model or per
	// GPU); ModelAs says where the user named it (ModelFromName,
	// ModelFromConstraint) and ModelOp the operator of that constraint.
	Model   string `json:"model,omitempty"`
	ModelAs string `json:"model_as,omitempty"`
	ModelOp string `json:"model_op,omitempty"`
	// Incarnation is the job's create index when it was pinned: a job
	// purged and registered again is another incarnation, and an old
	// placement copied into it counts for nothing.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Env is what the pin wrote into the GPU task's environment (see
	// PinWith); Priority says why, or why nothing was written.
	Env      map[string]string `json:"env,omitempty"`
	Priority string            `json:"priority,omitempty"`
	// Reason says why the placement was chosen. It is never written into
	// the meta (it depends on the cluster's state); the scheduler keeps it
	// in its records and API.
	Reason string `json:"reason,omitempty"`
}

// Summary is the pin in a line: where, not why (the scheduler's API says
// why: gpushare job status).
func (r *Record) Summary() string {
	out := fmt.Sprintf("pinned to %d node(s), %d GPU(s), %d share(s)", len(r.Nodes), len(r.GPUs), len(r.Shares))
	if r.Contract == ContractNode {
		out = fmt.Sprintf("pinned to %d node(s), checked in place (Nomad takes the lowest-indexed GPU with room: %d GPU(s), %d share(s) expected)",
			len(r.Nodes), len(r.GPUs), len(r.Shares))
	}
	if r.Blocks > 1 {
		out += fmt.Sprintf(", asked as %d device blocks of one GPU each", r.Blocks)
	}
	if r.Cell != "" {
		out += " in " + r.Cell
	}
	if r.Reason != "" {
		out += ": " + r.Reason
	}
	return out
}

// Incarnation is the job's create index (0 when unknown).
func Incarnation(job *api.Job) uint64 {
	if job.CreateIndex == nil {
		return 0
	}
	return *job.CreateIndex
}

// Digest names everything gpushare decides a group's placement on: the
// group's count, its tasks' CPU, memory and GPU request (device name,
// count, constraints other than a pin's share list), its gpushare.* meta
// (class, VC, profile, bounds, expected run time) and the policy. Two
// versions of a group with the same digest get the same placement when
// the shares they hold still fit.
func Digest(job *api.Job, group, policy string) string {
	tg := Group(job, group)
	if tg == nil {
		return ""
	}
	return digestAt(job, tg, group, policy, Count(tg))
}

// ForRequest reports whether rec was made for the group's request as the
// job now has it: the same Digest, or, for a pin that records its count,
// the same digest at that count (the group was scaled since; nothing else
// the decision depends on changed).
func (r *Record) ForRequest(job *api.Job, group string) bool {
	if r.Request == Digest(job, group, r.Policy) {
		return true
	}
	tg := Group(job, group)
	return tg != nil && r.Count > 0 && r.Request == digestAt(job, tg, group, r.Policy, r.Count)
}

// digestAt is Digest for the group at count allocations.
func digestAt(job *api.Job, tg *api.TaskGroup, group, policy string, count int) string {
	var mine *api.Constraint // a pin's share list, when the version carries one
	rec, ok := ParseRecord(job, group)
	if ok {
		mine = shareConstraint(rec)
	}
	h := sha256.New()
	fmt.Fprintf(h, "policy=%q\x00count=%d\x00", policy, count)
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		cpu, mem := 0, 0
		if t.Resources.CPU != nil {
			cpu = *t.Resources.CPU
		}
		if t.Resources.MemoryMB != nil {
			mem = *t.Resources.MemoryMB
		}
		fmt.Fprintf(h, "task=%q cpu=%d mem=%d\x00", t.Name, cpu, mem)
		t = userTask(t, rec) // a pin's split and model read as the user's block
		for _, d := range t.Resources.Devices {
			if !isOurs(d.Name) {
				continue
			}
			n := uint64(1)
			if d.Count != nil {
				n = *d.Count
			}
			fmt.Fprintf(h, "device=%q count=%d\x00", d.Name, n)
			for _, c := range d.Constraints {
				if mine == nil || !sameConstraint(c, mine) {
					fmt.Fprintf(h, "constraint=%q %q %q\x00", c.LTarget, c.Operand, c.RTarget)
				}
			}
		}
	}
	meta := Meta(job, tg)
	delete(meta, MetaPlacement)
	delete(meta, MetaSignature)
	if meta[MetaClass] == "normal" {
		delete(meta, MetaClass)
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		fmt.Fprintf(h, "meta=%q=%q\x00", k, meta[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// ParseRecord reads the placement a group's pin carries, if any (Carried).
func ParseRecord(job *api.Job, group string) (*Record, bool) {
	placement, _ := Carried(Group(job, group))
	if placement == "" {
		return nil, false
	}
	var r Record
	if err := json.Unmarshal([]byte(placement), &r); err != nil {
		return nil, false
	}
	return &r, true
}

// Wants reports whether a group asks for gpushare devices.
func Wants(tg *api.TaskGroup) bool { return deviceRequests(tg) > 0 }

// Count is how many allocations a group asks for (Nomad's default: 1).
func Count(tg *api.TaskGroup) int {
	if tg.Count != nil {
		return *tg.Count
	}
	return 1
}

// Meta is a group's gpushare.* meta: the group's wins over the job's, and
// empty values count as unset.
func Meta(job *api.Job, tg *api.TaskGroup) map[string]string {
	meta := map[string]string{}
	for _, m := range []map[string]string{job.Meta, tg.Meta} {
		for k, v := range m {
			if strings.HasPrefix(k, "gpushare.") && v != "" {
				meta[k] = v
			}
		}
	}
	return meta
}
