package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"unsafe"

	"github.com/gpushare/gpushare/scheduler/interference"
)

// Policy decides where requests go. Decide does not change the snapshot;
// Snapshot.Apply does. A policy keeps caches of per-node scores between
// calls (re-scoring only nodes that changed), so one policy value should
// drive one snapshot at a time; it is not safe for concurrent use.
type Policy interface {
	Name() string
	Decide(s *Snapshot, r Request) *Decision
}

// Policy names.
const (
	PolicyGpushare    = "gpushare"
	PolicyRandom      = "random"
	PolicyFirstFit    = "first-fit"
	PolicyBestFit     = "best-fit"
	PolicyGPUPacking  = "gpu-packing"
	PolicyFGD         = "fgd"
	PolicyHived       = "hived"
	PolicyNomadNative = "nomad-native"
)

type kind int

const (
	kGpushare kind = iota
	kRandom
	kFirstFit
	kBestFit
	kPacking
	kFGD
	kHived
	kNomad
)

var kinds = map[string]kind{
	PolicyGpushare: kGpushare, PolicyRandom: kRandom, PolicyFirstFit: kFirstFit, PolicyBestFit: kBestFit,
	PolicyGPUPacking: kPacking, PolicyFGD: kFGD, PolicyHived: kHived, PolicyNomadNative: kNomad,
}

// PolicyNames lists the policies New accepts.
func PolicyNames() []string {
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Options configure a policy.
type Options struct {
	// Seed drives the random choices of random and nomad-native; decisions
	// are a function of the snapshot, the request and the seed.
	Seed uint64
	// Mix is the expected mix of requests for fragmentation (fgd,
	// gpushare); empty means DefaultMix.
	Mix Mix
	// Model predicts interference (gpushare); nil means interference.Default.
	Model *interference.Model
	// Predictor, when set, predicts instead of Model, with uncertainty and
	// what was observed per GPU model (an *interference.Knowledge); nil
	// means Model alone, with no uncertainty.
	Predictor interference.Predictor
	// VCs are the virtual clusters with guaranteed capacity.
	VCs []VirtualCluster
	// MaxSlowdown is the default slowdown bound of production jobs
	// (gpushare); 0 means the snapshot's DefaultMaxSlowdown (10%).
	MaxSlowdown float64
	// BoundOnPrediction checks a production job's slowdown bound at the
	// predicted slowdown rather than at the prediction one uncertainty
	// worse. It is for a Predictor whose pairings are watched and undone
	// once seen breaking a bound (introspection with bounded cost): a
	// wrong prediction then costs at most one observation window below
	// the bound, where the uncertainty's margin keeps every pairing not
	// observed yet off a GPU type the model was not fitted on.
	BoundOnPrediction bool
	// TimesliceMaxPerGPU is the most time-sliced allocations one GPU
	// takes (Request.Timeslice); 0 means DefaultTimesliceMaxPerGPU.
	TimesliceMaxPerGPU int
}

// New returns the policy with the given name.
func New(name string, opts Options) (Policy, error) {
	k, ok := kinds[name]
	if !ok {
		return nil, fmt.Errorf("unknown policy %q: want one of %s", name, strings.Join(PolicyNames(), ", "))
	}
	if len(opts.Mix) == 0 {
		opts.Mix = DefaultMix()
	}
	if err := opts.Mix.Validate(); err != nil {
		return nil, err
	}
	if !(opts.MaxSlowdown >= 0 && opts.MaxSlowdown < 1) {
		return nil, fmt.Errorf("max slowdown %v must be within 0..1", opts.MaxSlowdown)
	}
	if opts.Model == nil {
		opts.Model = interference.Default()
	}
	if opts.Predictor == nil {
		opts.Predictor = opts.Model
	}
	switch {
	case opts.TimesliceMaxPerGPU == 0:
		opts.TimesliceMaxPerGPU = DefaultTimesliceMaxPerGPU
	case opts.TimesliceMaxPerGPU < 1:
		return nil, fmt.Errorf("time-sliced allocations per GPU %d must be at least 1", opts.TimesliceMaxPerGPU)
	}
	e := &engine{name: name, kind: k, opts: opts, buddy: map[buddyKey]buddyRes{}, vcs: map[string]*VirtualCluster{}}
	e.f.mix = opts.Mix
	e.f.memory = k == kGpushare
	for i := range opts.VCs {
		vc := &opts.VCs[i]
		if err := vc.Validate(); err != nil {
			return nil, err
		}
		if _, dup := e.vcs[vc.Name]; dup {
			return nil, fmt.Errorf("virtual cluster %q is defined twice", vc.Name)
		}
		e.vcs[vc.Name] = vc
	}
	return e, nil
}

type engine struct {
	name  string
	kind  kind
	opts  Options
	f     fgd
	snap  *Snapshot
	epoch uint64
	known uint64 // the predictor's version the caches were built with
	idx   map[string]*nodeIndex
	buddy map[buddyKey]buddyRes
	vcs   map[string]*VirtualCluster
	rng   *rand.Rand
	key   []byte
	allow []bool // by node index: the nodes the request being decided allows
	// allowKey identifies the request's Allowed set in the node index;
	// allowOf is the list allow and allowKey were made from, and for which
	// snapshot and epoch (a pass decides many requests of one list)
	allowKey   uint64
	allowOf    *string
	allowLen   int
	allowSnap  *Snapshot
	allowEpoch uint64
	// pair is interfere's room for the profiles and predictions of one
	// GPU's jobs (up to 8; more are allocated): kept here, for a buffer
	// on interfere's stack escapes through the predictor's interface, one
	// allocation per GPU looked at. An engine decides one request at a time.
	pair struct {
		profs    [8]interference.Profile
		out, unc [8]float64
	}
}

func (e *engine) Name() string { return e.name }

// sync resets the caches when the engine meets another snapshot or nodes
// were added.
func (e *engine) sync(s *Snapshot) {
	if v := e.opts.Predictor.Version(); e.snap != s || e.epoch != s.epoch || e.known != v {
		e.snap, e.epoch, e.known = s, s.epoch, v
		e.idx = map[string]*nodeIndex{}
		clear(e.buddy) // topology IDs are per snapshot
		e.f.cache = nil
		e.f.reset(len(s.nodes))
	}
}

func (e *engine) rounds() bool { return e.kind == kHived || e.kind == kNomad }

func (e *engine) buddyCells() bool { return e.kind == kGpushare || e.kind == kHived }

func (e *engine) randomNode() bool { return e.kind == kRandom || e.kind == kNomad }

// seedFor derives the random stream of one decision.
func (e *engine) seedFor(s *Snapshot, r *Request) *rand.Rand {
	h := uint64(14695981039346656037)
	for i := 0; i < len(r.ID); i++ {
		h = (h ^ uint64(r.ID[i])) * 1099511628211
	}
	return rand.New(rand.NewPCG(e.opts.Seed, h^s.Version()))
}

// allowFor marks the nodes of s that r allows (r.Allowed), for eval; a
// request without Allowed allows every node.
func (e *engine) allowFor(s *Snapshot, r *Request) {
	if r.Allowed == nil {
		return
	}
	if len(r.Allowed) > 0 && unsafe.SliceData(r.Allowed) == e.allowOf && len(r.Allowed) == e.allowLen && s == e.allowSnap && s.epoch == e.allowEpoch {
		return // the same list as the last request's
	}
	e.allowOf, e.allowLen, e.allowSnap, e.allowEpoch = unsafe.SliceData(r.Allowed), len(r.Allowed), s, s.epoch
	if cap(e.allow) < len(s.nodes) {
		e.allow = make([]bool, len(s.nodes))
	}
	e.allow = e.allow[:len(s.nodes)]
	clear(e.allow)
	h := uint64(14695981039346656037) // FNV-1a over the IDs
	for _, id := range r.Allowed {
		if n, ok := s.byID[id]; ok {
			e.allow[n.idx] = true
		}
		for i := 0; i < len(id); i++ {
			h = (h ^ uint64(id[i])) * 1099511628211
		}
		h = (h ^ ',') * 1099511628211
	}
	e.allowKey = h
}

// allowed reports whether the request being decided may use node n (see
// allowFor; only asked when it has Allowed).
func (e *engine) allowed(n *Node) bool { return n.idx < len(e.allow) && e.allow[n.idx] }
