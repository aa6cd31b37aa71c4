package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
)

// Request is one task group to place: Count allocations, each with CPU,
// memory and Shares shares of one GPU model.
type Request struct {
	// ID names the group (for example "<namespace>/<job>/<group>"); it
	// names the allocations of the decision and seeds random policies.
	ID    string `json:"id"`
	Count int    `json:"count"`
	// Res is per allocation.
	Res Resources `json:"resources"`
	// Shares per allocation: fewer than a GPU's shares_per_gpu is a fraction
	// of one GPU; otherwise a multiple of shares_per_gpu (whole GPUs).
	Shares int `json:"shares"`
	// Models are the allowed GPU models; empty allows any.
	Models []string `json:"models,omitempty"`
	VC     string   `json:"vc,omitempty"`
	Class  Class    `json:"class,omitempty"`
	// Profile is the job's interference profile (package pin fills it from
	// the gpushare.profile, sm_util and mem_bw meta).
	Profile interference.Profile `json:"profile"`
	// MaxSlowdown bounds a production job's predicted slowdown; 0 means the
	// policy's Options.MaxSlowdown, else the snapshot's DefaultMaxSlowdown.
	MaxSlowdown float64 `json:"max_slowdown,omitempty"`
	// Avoid lists node IDs not to use (for example nodes that lost it before).
	Avoid []string `json:"avoid,omitempty"`
	// Allowed, when not nil, lists the only node IDs the request may use:
	// the nodes the job's own rules allow (the service checks Nomad's
	// feasibility: datacenters, node pool, constraints, drivers, ...). An
	// empty, non-nil list allows no node. Unlike Avoid it is a property of
	// the job: Impossible honours it. A policy remembers the last list it
	// was given by its identity: do not change a list once decided on
	// (make a new one).
	Allowed []string `json:"allowed,omitempty"`
	// DistinctNodes puts at most one allocation of the request on a node
	// (Nomad's distinct_hosts); otherwise fractions of a group may stack
	// on one GPU of one node.
	DistinctNodes bool `json:"distinct_nodes,omitempty"`
	// Already counts, by node ID, allocations of the request's group that
	// run there and stay (a group pinned again around what it runs): the
	// request's allocations spread over nodes counting them too, as
	// Nomad's job anti-affinity would.
	Already map[string]int `json:"already,omitempty"`
	// Limits cap how many of the request's allocations may go to nodes
	// that share a value (Nomad's distinct_property): checked per
	// allocation, so a group of count > 1 never puts more on one value
	// than the rule leaves.
	Limits []Limit `json:"limits,omitempty"`
	// Pack lets the request's allocations share a node while another
	// node could take them. By default they spread over nodes, as Nomad's
	// job anti-affinity spreads a group's allocations (so one node's or
	// one GPU's fault does not take them all); a job asks to pack with
	// the meta gpushare.replicas = "pack".
	Pack bool `json:"pack,omitempty"`
	// Batch: the request's allocations end by themselves (a batch or
	// sysbatch job). They are never staged (SetStaging): a staged node's
	// holds are let go once the group's allocations took the GPUs not
	// held, and an allocation that ended by then has given its shares
	// back to the pinned set, so Nomad could hand the next one shares of
	// two GPUs, which Reserve refuses. A batch group's fractions on a
	// node stack on one GPU, and its whole-GPU allocations take one node
	// each (OnePerNode), as on a node the service cannot stage.
	Batch bool `json:"batch,omitempty"`
	// Unstaged narrows the nodes where the service stages the request's
	// allocations (SetStaging): on the nodes it covers they take one node
	// each (OnePerNode), and its Why says why in OnePerNode's reason.
	// Nil: wherever SetStaging allows.
	Unstaged *Unstaged `json:"-"`
	// HoldRes is what the job that holds an allocation's GPUs on a staged
	// node (the service's hold) takes of the node's CPU and memory: each
	// allocation of the request placed on a staged node counts at least
	// that much, as the hold runs on the node before the allocation does.
	HoldRes Resources `json:"-"`
	// Expected is how long the job expects to run (0: not declared). The
	// placement policies do not use it; the service orders waiting groups
	// by it (see queue.ResponseRatio).
	Expected time.Duration `json:"expected_runtime,omitempty"`
	// LearnedFrom is how many finished runs of the group Expected was
	// learned from, when the job declares none (0: declared, or none);
	// the service fills it (model.State.Request, queue.Runs).
	LearnedFrom int `json:"expected_runtime_learned_from,omitempty"`
	// Timeslice: the request's allocations are time-sliced (Gandiva's
	// suspend/resume; package pin sets it from gpushare.timeslice). Its
	// Shares count its GPU memory, not a cap on its compute: it goes only
	// on GPUs that hold no other kind of allocation, at most
	// Options.TimesliceMaxPerGPU of them per GPU, and the interference
	// model does not apply (they never run at once). See timeslice.go.
	Timeslice bool `json:"timeslice,omitempty"`
	// NomadPicksFirst: the request is decided for a pin that names only
	// the node where Nomad keeps it on the GPUs it picks itself
	// (decide.Config.InPlacePins; Snapshot.NomadChoosesGPU). An
	// allocation of several whole GPUs of a group whose plugin composes
	// them is then scored with the GPUs Nomad will take there, the
	// group's lowest-indexed wholly free ones (NomadPicksFirstGPU), and
	// the cell they form, not the best cell the node has free: the
	// request goes to the node where Nomad's pick is the best cell.
	// Fractions and single GPUs are scored as without it.
	NomadPicksFirst bool `json:"nomad_picks_first,omitempty"`
	// NomadIndexOrder: the group's device blocks carry a node pin's
	// first affinities, on the GPU's index (pin.IndexAffinities, written
	// before cell ranks and kept for the group's life), so Nomad takes a
	// node's GPUs lowest index first. Unset, they carry (or its first node
	// pin will write) the cell-rank affinities (pin.RankAffinities):
	// Nomad takes the GPUs in the node's cell order where its plugin
	// fingerprints ranks, lowest index first where it does not
	// (NomadPicksFirstGPU).
	NomadIndexOrder bool `json:"nomad_index_order,omitempty"`
}

// Limit is one distinct_property rule of a request: Of gives each node's
// value of the property (a node without one is not allowed at all: leave
// it out of Allowed), Left how many more allocations each value takes
// (Max for a value no allocation uses yet).
type Limit struct {
	Property string            `json:"property"`
	Of       map[string]string `json:"of"`
	Left     map[string]int    `json:"left,omitempty"`
	Max      int               `json:"max"`
}

// left is how many allocations value v still takes.
func (l *Limit) left(v string) int {
	if n, ok := l.Left[v]; ok {
		return n
	}
	return l.Max
}

// MaxCount bounds the allocations of one request.
const MaxCount = 10000

// ErrBadRequest is wrapped by every request validation error.
var ErrBadRequest = errors.New("invalid request")

// Validate checks the request on its own.
func (r *Request) Validate() error {
	var errs []string
	if r.ID == "" {
		errs = append(errs, "the request needs an ID (it names the allocations)")
	}
	if r.Count < 1 || r.Count > MaxCount {
		errs = append(errs, fmt.Sprintf("count %d must be within 1..%d", r.Count, MaxCount))
	}
	if r.Shares < 0 || r.Res.CPU < 0 || r.Res.MemoryMiB < 0 {
		errs = append(errs, "shares, cpu and memory must not be negative")
	}
	switch r.Class {
	case ClassNormal, ClassProduction, ClassOpportunistic:
	default:
		errs = append(errs, fmt.Sprintf("class %q must be %q or %q", r.Class, ClassProduction, ClassOpportunistic))
	}
	if err := r.Profile.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if !(r.MaxSlowdown >= 0 && r.MaxSlowdown < 1) {
		errs = append(errs, fmt.Sprintf("max slowdown %v must be within 0..1", r.MaxSlowdown))
	}
	for _, l := range r.Limits {
		if l.Max < 1 {
			errs = append(errs, fmt.Sprintf("distinct_property %s: a limit of %d allocations per value places none", l.Property, l.Max))
		}
	}
	if r.Expected < 0 {
		errs = append(errs, fmt.Sprintf("expected run time %v must not be negative", r.Expected))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrBadRequest, r.ID, strings.Join(errs, "; "))
	}
	return nil
}

// bound is the slowdown bound of a production job under this policy.
func (e *engine) bound(own float64) float64 { return e.snap.Bound(own, e.opts.MaxSlowdown) }

// Bound is the slowdown bound of a production job: its own (own > 0), else
// the configured one (configured > 0), else the snapshot's default. The
// placement core pairs under it and the decision step's introspection
// checks observations against it.
func (s *Snapshot) Bound(own, configured float64) float64 {
	switch {
	case own > 0:
		return own
	case configured > 0:
		return configured
	}
	return s.DefaultMaxSlowdown
}

func (r *Request) modelOK(model string) bool {
	if len(r.Models) == 0 {
		return true
	}
	for _, m := range r.Models {
		if m == model {
			return true
		}
	}
	return false
}

func (r *Request) avoids(id string) bool {
	for _, a := range r.Avoid {
		if a == id {
			return true
		}
	}
	return false
}

// allows reports whether the request may use node id (Allowed; every
// node when it is nil). The engine keeps a set of it instead (allowFor).
func (r *Request) allows(id string) bool { return r.Allowed == nil || slices.Contains(r.Allowed, id) }

// guaranteed reports whether the request counts against its VC's guarantee.
func (r *Request) guaranteed() bool { return r.Class != ClassOpportunistic }

// Placement is where one allocation goes.
type Placement struct {
	AllocID string `json:"alloc_id"`
	Node    string `json:"node"`
	// GPUs are the UUIDs of the GPUs used; Shares the exact share IDs.
	GPUs   []string `json:"gpus"`
	Shares []string `json:"shares"`
	// Cell names the smallest topology cell holding the GPUs.
	Cell string `json:"cell"`
	// Score is the policy's cost of the choice: lower is better.
	Score  float64 `json:"score"`
	Reason string  `json:"reason"`
	// Predicted is the predicted normalised throughput of the allocation
	// with the jobs already on its GPU (1 when alone or unprofiled).
	Predicted float64 `json:"predicted,omitempty"`
	// PredictedMate is the lowest predicted normalised throughput of the
	// allocations already on the GPU once this one joins them (1 when it
	// has the GPU to itself or the policy does not predict).
	PredictedMate float64 `json:"predicted_mate,omitempty"`
	// PredictedErr and PredictedMateErr are the uncertainties (one
	// standard error) of Predicted and PredictedMate: 0 when alone,
	// unprofiled, or the policy does not predict.
	PredictedErr     float64 `json:"predicted_err,omitempty"`
	PredictedMateErr float64 `json:"predicted_mate_err,omitempty"`

	req *Request
	res Resources
	at  *placedOn // where Decide put it, for Apply (placed.go)
}

func (p *Placement) alloc() Alloc {
	a := Alloc{ID: p.AllocID, Node: p.Node, Shares: p.Shares, Res: p.res}
	if p.req != nil {
		a.VC, a.Class, a.Profile, a.MaxSlowdown = p.req.VC, p.req.Class, p.req.Profile, p.req.MaxSlowdown
		a.Timeslice = p.req.Timeslice
	}
	return a
}

// Refusal codes name why a request could not be placed.
const (
	RefusedInvalid      = "invalid request"
	RefusedNoModel      = "no node has the GPU model"
	RefusedTooLarge     = "larger than any node"
	RefusedNoCapacity   = "not enough free capacity"
	RefusedTopology     = "no connected cell free"
	RefusedInterference = "interference bound"
	RefusedQuota        = "virtual cluster quota exhausted"
	RefusedOverQuota    = "larger than its guarantee"
	RefusedReserve      = "Reserve would refuse the shares"
	RefusedRules        = "no node the job's own rules allow"
)

// Refusal says why a request was not placed and what the user can do.
type Refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (r *Refusal) String() string {
	if r == nil {
		return ""
	}
	return r.Code + ": " + r.Message
}

// Decision is the outcome of one request.
type Decision struct {
	Request    string      `json:"request"`
	Policy     string      `json:"policy"`
	Placements []Placement `json:"placements,omitempty"`
	// Preempt are opportunistic allocations to stop first.
	Preempt []string `json:"preempt,omitempty"`
	Refusal *Refusal `json:"refusal,omitempty"`
	// InPlace says the decision may be pinned by node alone, leaving each
	// allocation's GPU to Nomad (Snapshot.NomadChoosesGPU): a pin Nomad
	// checks in place. The decision step sets it when its configuration
	// asks for such pins (decide.Config.InPlacePins).
	InPlace bool `json:"in_place,omitempty"`
	// PerGPU says Nomad keeps each allocation on the GPUs decided when
	// asked one device block per GPU (Snapshot.NomadChoosesGPU: nodes whose
	// plugin offers each GPU as a device group), whichever the pin: a pin
	// of allocations of several GPUs then asks one block per GPU. The
	// decision step sets it.
	PerGPU bool `json:"per_gpu,omitempty"`

	// on and gen: the snapshot and its version the decision was made on
	// (placed.go)
	on  *Snapshot
	gen uint64
}

// Placed reports whether the request was placed.
func (d *Decision) Placed() bool { return d.Refusal == nil && len(d.Placements) > 0 }

// shareSize classifies a request on a GPU with spg shares: a fraction
// (whole=0), whole GPUs (whole=k), or invalid.
func shareSize(shares, spg int) (frac, whole int, ok bool) {
	switch {
	case shares == 0:
		return 0, 0, true
	case shares < spg:
		return shares, 0, true
	case shares%spg == 0:
		return 0, shares / spg, true
	}
	return 0, 0, false
}

func shareIDs(uuid string, idx []int) []string { return devicefn.SharesOf(uuid, idx) }
