package gavel

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// Options tune a simulation.
type Options struct {
	// MaxSlowdown bounds each job's predicted slowdown when gpushare pairs
	// it (default DefaultMaxSlowdown).
	MaxSlowdown float64
	// Model predicts interference for gpushare (default interference.Default).
	Model *interference.Model
	// OnStep, when set, sees the actions of every decision step of the
	// gpushare policies, with the simulated time in seconds.
	OnStep func(now float64, actions []decide.Action)
	// Robustness perturbs what the policies believe (exact when zero).
	Robustness Robustness
	// NoIntrospection turns off the gpushare policies' introspection: no
	// observation of paired jobs, no unpairing, and predictions without
	// uncertainty (the model alone, as before introspection).
	NoIntrospection bool
	// ObserveAfter is how long a pair runs before the gpushare policies
	// see its progress (default DefaultObserveAfter), in seconds.
	ObserveAfter float64
	// UncertaintyScale scales the uncertainty of an unobserved prediction,
	// the model's cross-validated RMSE (0 means 1: the model's own).
	UncertaintyScale float64
	// Checkpoint is how often jobs checkpoint, in seconds: a job moved off
	// its GPU loses its work since its last checkpoint; 0 means it loses
	// all its work since it last started.
	Checkpoint float64
	// Elastic lets a share of the jobs grow into idle GPUs and shrink back
	// (the gpushare policies only; off when zero; see elastic.go).
	Elastic Elastic
	// Timeslice places single-GPU jobs that would wait time-sliced
	// (the exclusive policy only; see timeslice.go).
	Timeslice Timeslice
	// BoundedCost turns on the gpushare policies' bounded-cost pairing:
	// a pairing is weighed on its expected gain against what it costs if
	// it is as bad as one uncertainty below its prediction, bounded by
	// introspection (decide.Config.ObserveWithin), and the production
	// bound is checked at the prediction (placement.Options.
	// BoundOnPrediction), as a pair seen breaking it is unpaired within an
	// observation window. Off (the default), a pairing whose pessimistic
	// outcome loses, or breaks the bound, is not tried. Measured, not the
	// default: it lowers the average JCT on GPU types the model never saw
	// but meets both goals in one run more on P100, none on K80, and loses
	// runs on V100 (docs/results). Bounded cost needs introspection.
	BoundedCost bool
	// MaxStretch is gpushare's bound on what sharing may cost a job over
	// its life, a share of its run time alone (decide.Config.MaxStretch;
	// default DefaultMaxStretch, negative: none).
	MaxStretch float64
	// BoundTail lets a job of gpushare-bounded wait past its start in the
	// exclusive FCFS shadow while its completion stays within this
	// quantile of the shadow's completion times (queue.Shadow.Bound; 0:
	// no later than its shadow start).
	BoundTail float64
	// afterStep, when set (tests), sees the simulation after each
	// scheduling round.
	afterStep func(s *sim)
}

// DefaultObserveAfter is how long a pair runs before its progress is seen:
// ten minutes of samples.
const DefaultObserveAfter = 600

// DefaultMaxStretch is gpushare's bound on what sharing may cost a job
// over its life: two fifths of its run time alone (as the service's
// introspection.max_stretch default).
const DefaultMaxStretch = 0.4

// DefaultMaxSlowdown is the slowdown bound gpushare gives the jobs it pairs.
const DefaultMaxSlowdown = 0.6

// boundedCost reports whether the gpushare policies weigh a pairing's
// cost bounded by introspection (Options.BoundedCost).
func (o *Options) boundedCost() bool { return o.BoundedCost && !o.NoIntrospection }

// Outcome is one job's life.
type Outcome struct {
	Job    Job
	Start  float64
	Finish float64
	// Placed is false when the job could never run (larger than the cluster).
	Placed bool
	// SharedFor is the time it spent sharing a GPU, and SharedLoss what
	// that cost it: the time shared weighted by one less its normalised
	// throughput there.
	SharedFor, SharedLoss float64
	// Moves counts the times introspection moved it off a GPU, and Lost
	// the work it lost to them (seconds alone).
	Moves int
	Lost  float64
	// Elastic is whether it opted in to elastic groups; Grows and Shrinks
	// count the replicas it gained and gave back.
	Elastic        bool
	Grows, Shrinks int
}

// JCT is the job completion time.
func (o Outcome) JCT() float64 { return o.Finish - o.Job.Arrival }

// Queueing is the time from arrival to start.
func (o Outcome) Queueing() float64 { return o.Start - o.Job.Arrival }

type running struct {
	job       Job
	allocs    []string
	gpus      []string // UUIDs
	shares    []string // share IDs, for single-GPU jobs
	rem       float64  // steps left
	iso       float64  // steps/s alone
	rate      float64
	out       *Outcome
	multiNode bool
	// started is when it last started, partner the job sharing its GPU
	// (-1: none) since pairedAt, and seen whether its progress with that
	// partner was observed.
	started     float64
	startRem    float64
	lossAtStart float64 // its Outcome.SharedLoss when it started
	partner     int
	pairedAt    float64
	seen        bool
	// elastic jobs may grow to max replicas: grown are the replicas beyond
	// the job's own GPUs (gpus), oldest first.
	elastic bool
	max     int
	grown   []replica
	// ts: it runs time-sliced, taking turns with the time-sliced jobs of
	// its GPU (timeslice.go).
	ts bool
}

type sim struct {
	spec    policySpec
	opts    Options
	cluster Cluster
	thr     *Throughputs
	snap    *placement.Snapshot
	pol     placement.Policy
	now     float64
	run     map[int]*running
	onGPU   map[string][]int // GPU UUID -> running job IDs
	busyGPU float64          // integral of busy GPUs over time
	out     []Outcome
	gpuNode map[string]string // GPU UUID -> node ID
	// allocJob maps each running allocation to its job.
	allocJob map[string]int
	// know is what the gpushare policies know of interference: the
	// (perturbed) model corrected by observations; nil for the others.
	know *interference.Knowledge
	// left is the work left of jobs moved back to the queue.
	left map[int]float64
	// replicas numbers the grown replicas, in the order they grew.
	replicas int
	// shadow is the wait bound's exclusive FCFS schedule (policies with
	// spec.bounded; nil for the others); shadowNext is the first job not
	// yet arrived in it.
	shadow     *queue.Shadow
	shadowNext int
	// wholeWaits: a multi-GPU job waits ahead of the job being placed in
	// this round (time-slicing then takes no GPU a job holds; see
	// Timeslice.Greedy).
	wholeWaits bool
}

// Simulate runs one policy over a trace on a cluster.
func Simulate(policy string, jobs []Job, c Cluster, thr *Throughputs, opts Options) ([]Outcome, float64, error) {
	spec, err := specFor(policy)
	if err != nil {
		return nil, 0, err
	}
	if opts.MaxSlowdown == 0 {
		opts.MaxSlowdown = DefaultMaxSlowdown
	}
	if opts.MaxStretch == 0 {
		opts.MaxStretch = DefaultMaxStretch
	}
	if err := opts.Robustness.checkFit(); err != nil {
		return nil, 0, err
	}
	if err := opts.Timeslice.check(policy); err != nil {
		return nil, 0, err
	}
	if opts.Model == nil {
		opts.Model = interference.Default()
	}
	if rb := opts.Robustness; rb.FitFolds > 0 && spec.share == shareModel {
		opts.Model = heldOutModel(thr, rb.FitFolds, rb.FitFold)
	}
	snap, err := c.snapshot(gpuName(thr.gpu))
	if err != nil {
		return nil, 0, err
	}
	if opts.ObserveAfter <= 0 {
		opts.ObserveAfter = DefaultObserveAfter
	}
	popts := placement.Options{Model: opts.Model, MaxSlowdown: opts.MaxSlowdown, TimesliceMaxPerGPU: opts.Timeslice.maxPerGPU(),
		BoundOnPrediction: opts.boundedCost()}
	var know *interference.Knowledge
	if spec.share == shareModel {
		rb := opts.Robustness
		var base interference.Base = opts.Model
		if rb.Bias != 0 || rb.Noise != 0 {
			base = perturbed{m: opts.Model, bias: rb.Bias, noise: rb.Noise, seed: rb.Seed}
		}
		if opts.UncertaintyScale == 0 {
			opts.UncertaintyScale = 1
		}
		prior := opts.Model.Uncertainty * opts.UncertaintyScale
		if opts.NoIntrospection {
			prior = 0
		}
		know = interference.NewKnowledge(base, prior)
		popts.Predictor = know
	}
	pol, err := placement.New(spec.core, popts)
	if err != nil {
		return nil, 0, err
	}
	jobs = slices.Clone(jobs)
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Arrival, b.Arrival) })
	for i := range jobs {
		jobs[i].ID = i // jobs are numbered in arrival order
	}
	s := &sim{spec: spec, opts: opts, cluster: c, thr: thr, snap: snap, pol: pol,
		run: map[int]*running{}, onGPU: map[string][]int{}, out: make([]Outcome, len(jobs)),
		gpuNode: map[string]string{}, allocJob: map[string]int{}, know: know, left: map[int]float64{}}
	if spec.bounded {
		if s.shadow, err = queue.NewShadow(c.Nodes, c.GPUsPerNode); err != nil {
			return nil, 0, err
		}
	}
	for _, n := range snap.Nodes() {
		for _, g := range n.GPUs {
			s.gpuNode[g.UUID] = n.ID
		}
	}
	optIn := opts.Elastic.optIn(len(jobs))
	for i := range jobs {
		s.out[i] = Outcome{Job: jobs[i], Elastic: optIn[i] && s.elasticOn()}
		if _, err := thr.Isolated(jobs[i].Type, jobs[i].Scale, true); err != nil {
			return nil, 0, fmt.Errorf("job %d: %w", jobs[i].ID, err)
		}
		if _, err := opts.Timeslice.shares(jobs[i].Type, thr.gpu); opts.Timeslice.On && jobs[i].Scale == 1 && err != nil {
			return nil, 0, fmt.Errorf("job %d: %w", jobs[i].ID, err)
		}
	}
	var queue []int // indices into jobs
	next := 0
	for next < len(jobs) || len(queue) > 0 || len(s.run) > 0 {
		// The next event: an arrival or the first completion.
		t := math.Inf(1)
		if next < len(jobs) {
			t = jobs[next].Arrival
		}
		for _, r := range s.run {
			t = min(t, s.now+r.rem/r.rate)
		}
		t = min(t, s.nextObservation())
		if math.IsInf(t, 1) {
			break // only jobs that can never be placed are left
		}
		s.advance(t)
		for next < len(jobs) && jobs[next].Arrival <= s.now {
			queue = append(queue, next)
			next++
		}
		queue = s.schedule(queue)
		if opts.afterStep != nil {
			opts.afterStep(s)
		}
	}
	// Utilisation over the makespan, from the first arrival to the last
	// completion (no GPU is busy before the first arrival).
	end, first := 0.0, math.Inf(1)
	for _, o := range s.out {
		first = min(first, o.Job.Arrival)
		if o.Placed {
			end = max(end, o.Finish)
		}
	}
	util := 0.0
	if end > first {
		util = s.busyGPU / ((end - first) * float64(c.GPUs()))
	}
	return s.out, util, nil
}

// advance moves time to t, finishing the jobs that complete by then.
func (s *sim) advance(t float64) {
	dt := t - s.now
	s.busyGPU += dt * float64(len(s.onGPU))
	var done []int
	for id, r := range s.run {
		r.rem -= r.rate * dt
		if len(r.gpus) == 1 && len(s.onGPU[r.gpus[0]]) > 1 {
			r.out.SharedFor += dt
			r.out.SharedLoss += dt * max(0, 1-r.rate/r.iso)
		}
		if r.rem <= 1e-9*r.job.Steps || r.rem/r.rate <= 1e-6 {
			done = append(done, id)
		}
	}
	s.now = t
	slices.Sort(done)
	for _, id := range done {
		s.run[id].out.Finish = t
		s.stop(id)
	}
	if len(done) > 0 {
		s.rates()
	}
}

// rates sets every running job's throughput from its GPU's company.
func (s *sim) rates() {
	for _, r := range s.run {
		r.rate = s.elasticRate(r, r.grown)
		partner := -1
		if r.ts {
			r.rate *= s.opts.Timeslice.slice(len(s.onGPU[r.gpus[0]]))
		} else if len(r.gpus) == 1 {
			if others := s.onGPU[r.gpus[0]]; len(others) == 2 {
				p := others[0]
				if p == r.job.ID {
					p = others[1]
				}
				partner = p
				na, _, ok := s.thr.Pair(r.job.Type, s.run[p].job.Type)
				if !ok {
					panic(fmt.Sprintf("jobs %d and %d share a GPU but cannot", r.job.ID, p))
				}
				r.rate *= na
			}
		}
		if partner != r.partner {
			r.partner, r.pairedAt, r.seen = partner, s.now, false
		}
	}
}

// schedule tries the queued jobs in the policy's order and returns those
// still waiting.
func (s *sim) schedule(queue []int) []int {
	if s.spec.share == shareModel {
		left := s.scheduleLoop(queue)
		if s.elasticOn() && s.grow() {
			s.rates()
		}
		return left
	}
	if len(queue) == 0 {
		return queue
	}
	s.order(queue)
	s.wholeWaits = false
	failed := map[string]bool{} // shapes that did not fit since the last placement
	left := queue[:0:0]
	placed := false
	for _, i := range queue {
		j := s.out[i].Job
		key := strconv.Itoa(j.Scale)
		switch {
		case s.opts.Timeslice.On && j.Scale == 1:
			key = timesliceKey(j)
		case s.spec.share != shareNever && j.Scale == 1:
			key = j.Type
		}
		if j.Scale > s.cluster.GPUs() {
			continue // can never run: dropped, Placed stays false
		}
		if failed[key] || !s.place(j) {
			failed[key] = true
			left = append(left, i)
			s.wholeWaits = s.wholeWaits || j.Scale > 1
			continue
		}
		placed = true
		failed = map[string]bool{}
	}
	if placed {
		s.rates()
	}
	return left
}

func (s *sim) reqFor(j Job, shares int) placement.Request {
	return placement.Request{ID: "job-" + strconv.Itoa(j.ID), Count: 1, Shares: shares}
}

// place tries to start job j now.
func (s *sim) place(j Job) bool {
	const spg = devicefn.DefaultSharesPerGPU
	if s.opts.Timeslice.On && j.Scale == 1 {
		return s.placeTimesliced(j)
	}
	if j.Scale > 1 || s.spec.share == shareNever {
		per := min(j.Scale, s.cluster.GPUsPerNode)
		r := s.reqFor(j, per*spg)
		r.Count = (j.Scale + per - 1) / per
		d := s.pol.Decide(s.snap, r)
		if !d.Placed() {
			return false
		}
		if err := s.snap.Apply(d); err != nil {
			panic(err)
		}
		s.start(j, d.Placements, nil)
		return true
	}
	half := spg / 2
	if s.spec.share != shareAlways {
		// A free GPU first; the job holds half of it so that another may
		// pair with it later.
		d := s.pol.Decide(s.snap, s.reqFor(j, spg))
		if d.Placed() {
			p := d.Placements[0]
			s.addHalf(j, p.Node, p.GPUs[0], p.Shares[:half])
			return true
		}
	}
	switch s.spec.share {
	case shareBSBF:
		return s.pairBSBF(j)
	default: // shareAlways: the core chooses, memory decides
		r := s.reqFor(j, half)
		for range s.cluster.Nodes {
			d := s.pol.Decide(s.snap, r)
			if !d.Placed() {
				return false
			}
			p := d.Placements[0]
			if partner, ok := s.partnerOn(p.GPUs[0]); ok {
				if _, _, fits := s.thr.Pair(j.Type, partner.job.Type); !fits {
					r.Avoid = append(r.Avoid, p.Node) // does not fit in memory with its partner
					continue
				}
			}
			if err := s.snap.Apply(d); err != nil {
				panic(err)
			}
			s.start(j, d.Placements, p.Shares)
			return true
		}
	}
	return false
}

// addHalf records j on the given shares of one GPU.
func (s *sim) addHalf(j Job, node, uuid string, shares []string) {
	r := s.reqFor(j, len(shares))
	a := placement.Alloc{ID: r.ID + "[0]", Node: node, Shares: shares, Profile: r.Profile, Class: r.Class, MaxSlowdown: r.MaxSlowdown}
	if err := s.snap.AddAlloc(a); err != nil {
		panic(err)
	}
	s.start(j, []placement.Placement{{AllocID: a.ID, Node: node, GPUs: []string{uuid}}}, shares)
}

func (s *sim) start(j Job, ps []placement.Placement, shares []string) {
	r := &running{job: j, rem: j.Steps, out: &s.out[j.ID], shares: shares, started: s.now, partner: -1}
	if left, ok := s.left[j.ID]; ok {
		r.rem = left // moved back to the queue: its work left
		delete(s.left, j.ID)
	}
	r.startRem, r.lossAtStart = r.rem, r.out.SharedLoss
	for _, p := range ps {
		r.allocs = append(r.allocs, p.AllocID)
		s.allocJob[p.AllocID] = j.ID
		r.gpus = append(r.gpus, p.GPUs...)
		r.multiNode = r.multiNode || p.Node != ps[0].Node
	}
	r.iso, _ = s.thr.Isolated(j.Type, j.Scale, !r.multiNode)
	r.rate = r.iso
	if r.out.Elastic {
		r.elastic, r.max = true, min(j.Scale*s.opts.Elastic.maxFactor(), s.cluster.GPUs())
	}
	for _, g := range r.gpus {
		s.onGPU[g] = append(s.onGPU[g], j.ID)
	}
	s.run[j.ID] = r
	if !r.out.Placed {
		r.out.Start, r.out.Placed = s.now, true
	}
}
