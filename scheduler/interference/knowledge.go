package interference

import (
	"maps"
	"math"
	"sync"
)

// Predictor predicts what jobs that share one GPU get, and how sure it is.
// The placement core pairs a production job only when its predicted
// slowdown plus the uncertainty stays within its bound.
type Predictor interface {
	// PredictOn writes, for each of jobs sharing one GPU of model gpu, its
	// predicted normalised throughput (co-located / alone) into out and
	// the prediction's uncertainty (one standard error, in the same unit)
	// into unc. len(out) and len(unc) are at least len(jobs).
	PredictOn(gpu string, jobs []Profile, out, unc []float64)
	// Incompatible reports whether a and b were seen to break a bound
	// together on a GPU of model gpu; they are never paired there again.
	Incompatible(gpu string, a, b Profile) bool
	// Version changes whenever a prediction may have changed.
	Version() uint64
}

// Base is a prediction without uncertainty: *Model, or a wrapper that
// perturbs one (the simulator's robustness runs).
type Base interface {
	PredictInto(out []float64, jobs []Profile)
}

// PredictOn is the model alone: no uncertainty, nothing incompatible.
func (m *Model) PredictOn(_ string, jobs []Profile, out, unc []float64) {
	m.PredictInto(out, jobs)
	clear(unc[:len(jobs)])
}

// Incompatible is always false for the model alone.
func (m *Model) Incompatible(string, Profile, Profile) bool { return false }

// Version of a model is constant: its profiles do not change once built.
func (m *Model) Version() uint64 { return 0 }

// Knowledge is a model corrected by what was observed, per GPU model.
//
// A prediction starts as the model's, with uncertainty Prior (the model's
// own cross-validated error: what it says about itself, not a constant
// tuned to a cluster). What is observed on a GPU model then moves it, as a
// normal prior meets normal observations:
//   - of any pair on the GPU model: how wrong the model is there. The
//     first observation of each pair, set against the model's prediction
//     for it, is one sample of the model's error on that GPU model; the
//     mean error shifts every prediction there (shrunk towards none, the
//     prior counting as PriorWeight samples), and the root mean square
//     error, with the prior's Prior counting as PriorWeight samples, is
//     the uncertainty of a combination nothing was observed of (see
//     Belief). A GPU type the model was not fitted on is learned as it
//     runs: pairs there are predicted as wrong as they were seen to be;
//   - of the same pair on the same GPU model: the estimate is the average
//     of the prediction above and the n observations, weighted 1 : n,
//     and its uncertainty the GPU model's divided by sqrt(n+1);
//   - of the job with other partners on the same GPU model: the model's
//     prediction is shifted by the job's mean error there (shrunk towards
//     the GPU model's, weighted the same way), with the same shrinking
//     uncertainty.
//
// Nothing observed on one GPU model changes a prediction on another: a
// GPU type nobody has run on keeps the model's prediction and its full
// uncertainty. A pair seen breaking its bound is remembered as
// incompatible on that GPU model.
//
// Jobs are known by Profile.Key: a named profile, else the job it
// describes, else its fractions. Knowledge is safe for concurrent use.
type Knowledge struct {
	base  Base
	prior float64

	mu    sync.Mutex
	pairs map[pairKey]*tally // observed throughput of job with partner
	jobs  map[jobKey]*tally  // observed minus predicted throughput of job
	gpus  map[string]*tally  // the model's error on each pair's first observation, per GPU model
	bad   map[pairKey]bool   // unordered pairs (job <= with)
	ver   uint64
}

// PriorWeight is how many observed pairs the model's own uncertainty
// weighs as, against what is observed on a GPU model (see Belief): a few,
// so that a GPU type the model is wrong on overturns it after a handful of
// pairs, and one lucky pair does not.
const PriorWeight = 4

type pairKey struct{ gpu, job, with string }

type jobKey struct{ gpu, job string }

type tally struct {
	n   float64
	sum float64
	sq  float64 // sum of squares (the GPU models' tallies)
}

func (t *tally) mean() float64 { return t.sum / t.n }

// NewKnowledge starts from base's predictions with uncertainty prior.
func NewKnowledge(base Base, prior float64) *Knowledge {
	return &Knowledge{base: base, prior: max(prior, 0),
		pairs: map[pairKey]*tally{}, jobs: map[jobKey]*tally{}, gpus: map[string]*tally{}, bad: map[pairKey]bool{}}
}

// Prior is the uncertainty of a prediction nothing was observed for.
func (k *Knowledge) Prior() float64 { return k.prior }

// Key names a profile for observations: its name, else the job it
// describes (ID), else its fractions.
func (p Profile) Key() string {
	switch {
	case p.Name != "":
		return p.Name
	case p.ID != "":
		return p.ID
	}
	return p.String()
}

// Observe records that job ran at normalised throughput norm (co-located
// / alone, clamped to 0..1) while sharing a GPU of model gpu with partner.
// Observations of unprofiled jobs are kept too: the estimate of such a
// pair starts at the model's 1 (no interference) and moves.
func (k *Knowledge) Observe(gpu string, job, partner Profile, norm float64) {
	if math.IsNaN(norm) {
		return
	}
	norm = min(max(norm, 0), 1)
	var pred [2]float64
	k.base.PredictInto(pred[:], []Profile{job, partner})
	k.mu.Lock()
	defer k.mu.Unlock()
	pk := pairKey{gpu, job.Key(), partner.Key()}
	if k.pairs[pk] == nil && job.Known() && partner.Known() {
		// a pair seen for the first time: how wrong the model was of a
		// combination nothing was known of on this GPU model
		add(k.gpus, gpu, norm-pred[0])
	}
	add(k.pairs, pk, norm)
	add(k.jobs, jobKey{gpu, job.Key()}, norm-pred[0])
	k.ver++
}

// Belief is what was learned of the model on GPU model gpu: its mean
// error there (observed minus predicted normalised throughput, shrunk
// towards 0 as if PriorWeight pairs had shown none), the uncertainty of a
// pair nothing was observed of (the root mean square error of the pairs
// seen, with Prior counting as PriorWeight of them), and how many pairs
// were seen. With none, it is (0, Prior, 0).
func (k *Knowledge) Belief(gpu string) (bias, sd float64, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.belief(gpu)
}

func (k *Knowledge) belief(gpu string) (bias, sd float64, n int) {
	t := k.gpus[gpu]
	if t == nil {
		return 0, k.prior, 0
	}
	w := float64(PriorWeight)
	return t.sum / (t.n + w), math.Sqrt((w*k.prior*k.prior + t.sq) / (t.n + w)), int(t.n)
}

func add[K comparable](m map[K]*tally, key K, v float64) {
	t := m[key]
	if t == nil {
		t = &tally{}
		m[key] = t
	}
	t.n++
	t.sum += v
	t.sq += v * v
}

// MarkIncompatible remembers that a and b must not share a GPU of model
// gpu again.
func (k *Knowledge) MarkIncompatible(gpu string, a, b Profile) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bad[unordered(gpu, a.Key(), b.Key())] = true
	k.ver++
}

func unordered(gpu, a, b string) pairKey {
	if b < a {
		a, b = b, a
	}
	return pairKey{gpu, a, b}
}

// Incompatible implements Predictor.
func (k *Knowledge) Incompatible(gpu string, a, b Profile) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bad[unordered(gpu, a.Key(), b.Key())]
}

// Version implements Predictor.
func (k *Knowledge) Version() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ver
}

// PredictOn implements Predictor. Observations refine pairs only (the
// measurements are of pairs); a GPU shared by three or more jobs gets the
// model's prediction with the prior uncertainty.
func (k *Knowledge) PredictOn(gpu string, jobs []Profile, out, unc []float64) {
	k.base.PredictInto(out, jobs)
	for i := range jobs {
		unc[i] = 0
		if len(jobs) > 1 && jobs[i].Known() {
			unc[i] = k.prior // the model's own error; it says nothing of an unprofiled job
		}
	}
	if len(jobs) != 2 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	bias, sd, _ := k.belief(gpu)
	for i := range 2 {
		job, partner := jobs[i], jobs[1-i]
		base, prior, shift := out[i], out[i], 0.0
		if job.Known() && partner.Known() {
			shift = bias
			prior = clamp01(base + bias)
			out[i], unc[i] = prior, sd
		}
		if t := k.pairs[pairKey{gpu, job.Key(), partner.Key()}]; t != nil {
			out[i] = (prior + t.sum) / (t.n + 1)
			unc[i] = sd / math.Sqrt(t.n+1)
		} else if t := k.jobs[jobKey{gpu, job.Key()}]; t != nil {
			out[i] = clamp01(base + (shift+t.sum)/(t.n+1))
			unc[i] = sd / math.Sqrt(t.n+1)
		}
	}
}

// Observed returns the estimate of job's throughput with partner on a GPU
// of model gpu from observations alone, and how many there were.
func (k *Knowledge) Observed(gpu string, job, partner Profile) (mean float64, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t := k.pairs[pairKey{gpu, job.Key(), partner.Key()}]; t != nil {
		return t.mean(), int(t.n)
	}
	return 0, 0
}

// Forget drops what was observed of the jobs gone reports (by Profile.Key:
// those whose job was purged) and returns how many entries went.
func (k *Knowledge) Forget(gone func(job string) bool) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(k.pairs) + len(k.jobs) + len(k.bad)
	maps.DeleteFunc(k.pairs, func(p pairKey, _ *tally) bool { return gone(p.job) || gone(p.with) })
	maps.DeleteFunc(k.jobs, func(j jobKey, _ *tally) bool { return gone(j.job) })
	maps.DeleteFunc(k.bad, func(p pairKey, _ bool) bool { return gone(p.job) || gone(p.with) })
	n -= len(k.pairs) + len(k.jobs) + len(k.bad)
	if n > 0 {
		k.ver++
	}
	return n
}

// Len is how many entries the knowledge holds: observed pairs, observed
// jobs and incompatible pairs.
func (k *Knowledge) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pairs) + len(k.jobs) + len(k.bad)
}
