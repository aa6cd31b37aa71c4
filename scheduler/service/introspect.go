package service

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// statProcessSM is the plugin's per-share SM utilisation of the processes
// that hold the share (plugin.StatProcessSM).
const statProcessSM = "Process SM utilization"

// Bounds of what introspection keeps in memory.
const (
	maxAloneSamples  = 30 // per group
	maxSharedSamples = 60 // per allocation
)

// introspection watches allocations that share a GPU (Gandiva's
// introspection): it samples the SM utilisation of each one's processes,
// divides it by the group's utilisation alone to get its normalised
// throughput, hands that to decide.Step (decide.Input.Running), feeds it
// to the placement policy's interference knowledge, and executes the
// step's Unpair actions. It owns what it samples and keeps, behind mu:
// the loop hands it the model's facts (probes, the state and snapshot a
// pass read) and executes the Unpair actions it leads to (loop.unpair),
// and the records save and read what it persists (items, read). mu is
// taken after the model's lock (cluster.mu) when both are held, never
// before.
type introspection struct {
	window  time.Duration
	samples int
	know    *knowledge
	unpairs prometheus.Counter

	mu sync.Mutex // guards the fields below but prof
	// alone are the process SM samples (percent) of groups while alone on
	// their GPU, by group key.
	alone map[string][]float64
	// shared are the samples of allocations while they share their GPU.
	shared map[string]*sharedRun
	// lost is, by allocation, what sharing has cost it so far (charge).
	lost map[string]*lostTally
	// rec is what is persisted (introspect_state.go).
	rec pairRecords
	// prof holds the configured profiles, never gone with a job.
	prof *interference.Model
}

// sharedRun is one allocation's samples since its GPU's other
// allocations last changed.
type sharedRun struct {
	partners string // the other allocations on its GPU, sorted
	samples  []sample
	fed      time.Time // when it was last observed into the knowledge
}

// lostTally is the time sharing has cost an allocation, charged at each
// judgement since the one before (at; zero while it was not judged), and
// its normalised throughput at the last judgement (norm; 0 while it was
// not judged: alone).
type lostTally struct {
	at   time.Time
	lost time.Duration
	norm float64
}

type sample struct {
	at  time.Time
	pct float64
}

func newIntrospection(cfg *config.Config, prof *interference.Model) *introspection {
	return &introspection{
		window: cfg.IntrospectionWindow(), samples: cfg.IntrospectionSamples(),
		know: newKnowledge(prof),
		unpairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpushare_unpairs_total",
			Help: "Allocations stopped and their group gated again because their pairing on a GPU ran slower than a production job's bound."}),
		alone: map[string][]float64{}, shared: map[string]*sharedRun{}, lost: map[string]*lostTally{},
		rec: newPairRecords(), prof: prof,
	}
}

// predictor is what the placement policy predicts with: the knowledge,
// or nil (the model alone) when introspection is off.
func (in *introspection) predictor(on bool) interference.Predictor {
	if !on {
		return nil
	}
	return in.know
}

// probe is one allocation to sample.
type probe struct {
	id, key, node, partners string
	shares                  map[string]bool
}

// introspectSample reads the plugin's per-share process SM utilisation of
// every running allocation on a GPU: alone, it tells the group's
// utilisation alone; sharing, the allocation's progress next to its
// partners; introspection keeps them. Only the leader samples.
func (s *sampler) introspectSample(ctx context.Context) {
	if s.lease.follows() {
		return
	}
	s.c.mu.Lock()
	probes := probesOf(s.c.state, *s.preempted)
	s.c.mu.Unlock()

	byNode := map[string][]*api.DeviceGroupStats{}
	got := map[string]float64{}
	for _, p := range probes {
		stats := deviceStatsOnce(ctx, s.nomad, s.log, byNode, p.node)
		if pct, ok := processSM(stats, p.shares); ok {
			got[p.id] = pct
		}
	}
	s.intro.sampled(probes, got, s.now())
}

// sampled keeps the samples got, by allocation, of probes, read at now:
// an allocation alone adds to its group's samples alone, one sharing its
// GPU to its run beside these partners. The runs of allocations no
// longer probed are forgotten.
func (in *introspection) sampled(probes []probe, got map[string]float64, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	live := map[string]bool{}
	for _, p := range probes {
		live[p.id] = true
		pct, ok := got[p.id]
		if !ok {
			continue
		}
		if p.partners == "" {
			in.alone[p.key] = last(append(in.alone[p.key], pct), maxAloneSamples)
			delete(in.shared, p.id)
			continue
		}
		r := in.shared[p.id]
		if r == nil || r.partners != p.partners {
			r = &sharedRun{partners: p.partners}
			in.shared[p.id] = r
		}
		r.samples = last(append(r.samples, sample{at: now, pct: pct}), maxSharedSamples)
	}
	for id := range in.shared {
		if !live[id] {
			delete(in.shared, id)
		}
	}
}

// probesOf lists the running allocations on GPUs of state and who they
// share them with, but those being stopped. The caller holds the model's
// lock.
func probesOf(state *model.State, stopped stopping) []probe {
	on := map[string][]string{} // GPU UUID -> live allocations
	for id, a := range state.Allocs {
		if stopped.has(id) || !model.Live(a) {
			continue
		}
		for u := range gpusOf(a) {
			on[u] = append(on[u], id)
		}
	}
	var out []probe
	for id, a := range state.Allocs {
		if stopped.has(id) || !model.Live(a) || a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		if !state.Manages(a.Namespace) {
			continue // a neighbour: its shares count, its progress is not judged
		}
		gpus := gpusOf(a)
		if len(gpus) == 0 {
			continue
		}
		var partners []string
		for u := range gpus {
			for _, o := range on[u] {
				if o != id && !slices.Contains(partners, o) {
					partners = append(partners, o)
				}
			}
		}
		slices.Sort(partners)
		shares := map[string]bool{}
		for _, sh := range model.Shares(a) {
			shares[sh] = true
		}
		job := state.Jobs[model.JobKey(a.Namespace, a.JobID)]
		key := model.AllocKey(a).String()
		if job != nil {
			key = pin.GroupKey(job, a.TaskGroup)
		}
		out = append(out, probe{id: id, key: key, node: a.NodeID, partners: strings.Join(partners, ","), shares: shares})
	}
	slices.SortFunc(out, func(a, b probe) int { return strings.Compare(a.id, b.id) })
	return out
}

// processSM averages the plugin's process SM utilisation over an
// allocation's shares that report it.
func processSM(groups []*api.DeviceGroupStats, shares map[string]bool) (float64, bool) {
	sum, n := 0.0, 0
	for _, g := range groups {
		if g.Vendor != devicefn.Vendor || g.Type != devicefn.DeviceType {
			continue
		}
		for id, st := range g.InstanceStats {
			if !shares[id] || st == nil || st.Stats == nil {
				continue
			}
			if v, ok := pct(st.Stats.Attributes[statProcessSM]); ok {
				sum += v
				n++
			}
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// running is what decide.Step reads of the allocations that share a GPU:
// their group, when they started and, once a window of samples is in,
// their normalised throughput and its uncertainty. Each judged pairing is
// also observed into the knowledge, once per window. Only allocations of
// managed namespaces are listed: the step never moves one it is not told
// of, so a neighbour of another namespace is never stopped or gated. The
// caller is the leader and holds s.mu.
func (s *loop) running(snap *placement.Snapshot, now time.Time) map[string]decide.Running {
	if !s.cfg.IntrospectionOn() {
		return nil
	}
	return s.intro.running(snap, s.state, now)
}

// running is loop.running: the allocations of state and snap that share
// a GPU, judged on their samples. The caller holds the model's lock.
func (in *introspection) running(snap *placement.Snapshot, state *model.State, now time.Time) map[string]decide.Running {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]decide.Running{}
	charged := map[string]bool{}
	defer in.settle(state, snap, charged)
	for _, id := range slices.Sorted(maps.Keys(in.shared)) {
		a, ok := state.Allocs[id]
		pa, inSnap := snap.Alloc(id)
		if !ok || !inSnap || !state.Manages(a.Namespace) {
			continue
		}
		uuid, gpuModel, ok := snap.SoleGPU(pa.ID)
		if !ok {
			continue
		}
		var others []string
		for _, o := range snap.OnGPU(uuid) {
			if o != id {
				others = append(others, o)
			}
		}
		if len(others) == 0 {
			continue
		}
		r := decide.Running{Group: model.AllocKey(a), Started: startedAt(a)}
		for _, o := range others {
			if oa, ok := state.Allocs[o]; ok && state.Manages(oa.Namespace) {
				if _, seen := out[o]; !seen {
					out[o] = decide.Running{Group: model.AllocKey(oa), Started: startedAt(oa)}
				}
			}
		}
		run := in.shared[id]
		ref, refErr := in.aloneRef(state, a, pa)
		if norm, err, ok := in.judge(run, ref, refErr); ok {
			r.Norm, r.Err = norm, err
			if !pa.Timeslice { // slower by its turns, not by a pairing
				in.charge(id, norm, now)
				charged[id] = true
			}
			if len(others) == 1 && now.Sub(run.fed) >= in.window {
				if po, ok := snap.Alloc(others[0]); ok {
					run.fed = now
					in.observe(gpuModel, pa.Profile, po.Profile, norm)
				}
			}
		}
		out[id] = r
	}
	return out
}

// charge adds to allocation id's loss to sharing the time since it was
// last judged, weighted by one less its throughput now (norm). The first
// judgement of a run only starts the clock: the window before it is the
// judgement's own. The caller holds in.mu.
func (in *introspection) charge(id string, norm float64, now time.Time) {
	t := in.lost[id]
	if t == nil {
		t = &lostTally{}
		in.lost[id] = t
	}
	if !t.at.IsZero() && now.After(t.at) {
		t.lost += time.Duration(float64(now.Sub(t.at)) * max(0, 1-norm))
	}
	t.at, t.norm = now, norm
}

// settle stops the clock of the allocations not judged in this pass (their
// run is too new, or they run alone), forgets the throughput of those that
// no longer share a GPU in snap (0: alone) and forgets those gone. One
// that still shares keeps the throughput it was last judged at until it is
// judged again: its expected end counts it (a new leader's first passes,
// before a window of samples is in, read the old leader's). The caller
// holds in.mu.
func (in *introspection) settle(state *model.State, snap *placement.Snapshot, charged map[string]bool) {
	for id, t := range in.lost {
		if _, ok := state.Allocs[id]; !ok {
			delete(in.lost, id)
			continue
		}
		if !charged[id] {
			t.at = time.Time{}
		}
		if uuid, _, ok := snap.SoleGPU(id); !ok || len(snap.OnGPU(uuid)) < 2 {
			t.norm = 0
		}
	}
}

// progress is, by allocation sharing has cost something, that cost so far
// and its normalised throughput when last judged (0: alone since).
func (in *introspection) progress() map[string]lostTally {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]lostTally, len(in.lost))
	for id, t := range in.lost {
		if t.lost > 0 || t.norm > 0 {
			out[id] = lostTally{lost: t.lost, norm: t.norm}
		}
	}
	return out
}

// chargeOf is what sharing has cost allocation id so far (0: nothing, or
// not known).
func (in *introspection) chargeOf(id string) time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	if t := in.lost[id]; t != nil {
		return max(t.lost, 0)
	}
	return 0
}

// lostToSharing is, by allocation, the time sharing has cost it so far.
func (in *introspection) lostToSharing() map[string]time.Duration {
	out := map[string]time.Duration{}
	for id, p := range in.progress() {
		if p.lost > 0 {
			out[id] = p.lost
		}
	}
	return out
}

// judge is an allocation's normalised throughput over its latest window
// of samples while shared, against its utilisation alone (ref, with its
// standard error), once there are enough samples over a window.
func (in *introspection) judge(run *sharedRun, ref, refErr float64) (norm, err float64, ok bool) {
	if run == nil || ref <= 0 {
		return 0, 0, false
	}
	// the newest samples that span a window (and are enough of them): a
	// pairing whose interference changes is judged on what it does now
	n := len(run.samples)
	from := n - 1
	for from > 0 && (n-from < in.samples || run.samples[n-1].at.Sub(run.samples[from].at) < in.window) {
		from--
	}
	if n-from < in.samples || run.samples[n-1].at.Sub(run.samples[from].at) < in.window {
		return 0, 0, false
	}
	vals := make([]float64, 0, n-from)
	for _, smp := range run.samples[from:] {
		vals = append(vals, smp.pct)
	}
	mean, se := meanErr(vals)
	norm = max(mean/ref, 1e-3) // 0 would read as "not observed"
	// relative errors of a quotient add in quadrature
	err = math.Hypot(se/ref, norm*refErr/ref)
	return norm, err, true
}

// aloneRef is an allocation's SM utilisation alone, in percent, and its
// standard error: measured while its group ran alone, else its profile's
// (declared, named or learned); 0 when unknown. The caller holds in.mu.
func (in *introspection) aloneRef(state *model.State, a *api.Allocation, pa placement.Alloc) (float64, float64) {
	key := model.AllocKey(a).String()
	if job := state.Jobs[model.JobKey(a.Namespace, a.JobID)]; job != nil {
		key = pin.GroupKey(job, a.TaskGroup)
	}
	if vals := in.alone[key]; len(vals) > 0 {
		return meanErr(vals)
	}
	return 100 * pa.Profile.SM, 0
}

func meanErr(vals []float64) (mean, se float64) {
	for _, v := range vals {
		mean += v
	}
	mean /= float64(len(vals))
	if len(vals) < 2 {
		return mean, 0
	}
	ss := 0.0
	for _, v := range vals {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss/float64(len(vals)-1)) / math.Sqrt(float64(len(vals)))
}

// startedAt is when an allocation's first task started, else when Nomad
// created it.
func startedAt(a *api.Allocation) time.Time {
	var first time.Time
	for _, ts := range a.TaskStates {
		if ts != nil && !ts.StartedAt.IsZero() && (first.IsZero() || ts.StartedAt.Before(first)) {
			first = ts.StartedAt
		}
	}
	if first.IsZero() {
		return time.Unix(0, a.CreateTime)
	}
	return first
}

// unpair executes a decide.Unpair: the pair is remembered as incompatible
// on its GPU model, the moved allocation is stopped and its group gated
// again, so that it waits and is placed elsewhere, like a preemption.
func (s *loop) unpair(ctx context.Context, a decide.Action, pending map[decide.Key]string) error {
	log := s.log.With("job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group)
	if p := a.Pair; p != nil {
		s.intro.markIncompatible(p.GPUModel, p.Slow, p.With)
	}
	if err := s.gate.gateAgain(ctx, a.Allocs, nil); err != nil {
		pending[a.Group] = s.refusals.failed(a.Group, "unpair", err, s.now())
		log.Warn("cannot unpair; will retry", "error", err, "reason", a.Reason)
		return err
	}
	s.intro.noteUnpaired(a.Group, a.Reason, s.now())
	pending[a.Group] = "unpaired: " + a.Reason
	log.Warn("unpaired a job from a GPU where a production job ran slower than its bound; its group waits at the gate again and is placed elsewhere",
		"allocations", a.Allocs, "reason", a.Reason)
	return nil
}

// knowledge is the placement policy's interference.Predictor: the
// Knowledge this replica holds, replaced whole when a replica reads the
// leader's records.
type knowledge struct {
	base *interference.Model
	mu   sync.Mutex
	k    *interference.Knowledge
	gen  uint64
}

func newKnowledge(base *interference.Model) *knowledge {
	return &knowledge{base: base, k: interference.NewKnowledge(base, base.Uncertainty)}
}

func (w *knowledge) cur() *interference.Knowledge {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.k
}

// reset starts again from the model alone.
func (w *knowledge) reset() *interference.Knowledge {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.k = interference.NewKnowledge(w.base, w.base.Uncertainty)
	w.gen++
	return w.k
}

// PredictOn implements interference.Predictor.
func (w *knowledge) PredictOn(gpu string, jobs []interference.Profile, out, unc []float64) {
	w.cur().PredictOn(gpu, jobs, out, unc)
}

// Incompatible implements interference.Predictor.
func (w *knowledge) Incompatible(gpu string, a, b interference.Profile) bool {
	return w.cur().Incompatible(gpu, a, b)
}

// Version implements interference.Predictor.
func (w *knowledge) Version() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen<<40 + w.k.Version()
}

func last[T any](s []T, n int) []T {
	if len(s) > n {
		return slices.Clone(s[len(s)-n:])
	}
	return s
}
