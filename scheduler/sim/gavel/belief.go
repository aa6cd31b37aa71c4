package gavel

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/queue"
)

// Robustness is how wrong the scheduler's knowledge is in a run: the
// interference model's predictions and the run times users declare. The
// simulated cluster always runs at Gavel's measured throughputs; only what
// the policies believe changes.
type Robustness struct {
	// Name labels the condition in reports ("" is the exact one).
	Name string `json:"name,omitempty"`
	// Bias is added to every predicted normalised throughput of a shared
	// GPU: +0.15 is a model that believes pairs 0.15 faster than it says.
	Bias float64 `json:"model_bias,omitempty"`
	// Noise is the standard deviation of an error added to each job's
	// prediction with each partner (fixed per pair and seed).
	Noise float64 `json:"model_noise,omitempty"`
	// RuntimeSigma multiplies each declared run time by a log-normal
	// factor exp(N(0, sigma)), fixed per job and seed.
	RuntimeSigma float64 `json:"runtime_sigma,omitempty"`
	// NoRuntimes declares no run time at all: the policies that order by
	// run time see the default for every job.
	NoRuntimes bool `json:"no_runtimes,omitempty"`
	// Seed drives the noise and the run-time errors.
	Seed uint64 `json:"seed,omitempty"`
	// FitFolds, when not zero, fits gpushare's model on fold FitFold
	// (0-based) of FitFolds of the measured pairs only: a GPU type the
	// model was not fitted on (see heldout.go).
	FitFolds uint32 `json:"fit_folds,omitempty"`
	FitFold  uint32 `json:"fit_fold,omitempty"`
}

// Exact reports whether nothing is perturbed.
func (r Robustness) Exact() bool {
	return r.Bias == 0 && r.Noise == 0 && r.RuntimeSigma == 0 && !r.NoRuntimes && r.FitFolds == 0
}

// RuntimesOnly reports whether only run times are perturbed (the policies
// without an interference model are affected too).
func (r Robustness) RuntimesOnly() bool {
	return r.Bias == 0 && r.Noise == 0 && r.FitFolds == 0 && !r.Exact()
}

// normal draws a standard normal value fixed by the seed and the names.
func normal(seed uint64, names ...string) float64 {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(seed, h.Sum64())).NormFloat64()
}

// perturbed is the interference model as a wrong one would predict.
type perturbed struct {
	m           *interference.Model
	bias, noise float64
	seed        uint64
}

func (p perturbed) PredictInto(out []float64, jobs []interference.Profile) {
	p.m.PredictInto(out, jobs)
	if len(jobs) < 2 {
		return
	}
	for i := range jobs {
		names := []string{jobs[i].Key()}
		for j := range jobs {
			if j != i {
				names = append(names, jobs[j].Key())
			}
		}
		e := p.bias
		if p.noise > 0 {
			e += p.noise * normal(p.seed, names...)
		}
		out[i] = min(max(out[i]+e, 0.01), 1)
	}
}

// declared is the run time the policies believe job j takes alone (0: none
// declared): its true run time, off by the run's log-normal factor.
func (s *sim) declared(j Job) float64 {
	rb := s.opts.Robustness
	if rb.NoRuntimes {
		return 0
	}
	t := s.expected(j)
	if rb.RuntimeSigma > 0 {
		t *= math.Exp(rb.RuntimeSigma * normal(rb.Seed, "runtime", j.Type, strconv.Itoa(j.ID)))
	}
	return t
}

// believedLeft is how long running job r is believed to need from now, as
// the service knows it (queue.Left): the run time declared for the work
// left when it last started, less the time it ran since net of what
// sharing cost it then, at its rate now. When the
// declared run times are exact that is the truth, which is returned as it
// is (no rounding moves a decision).
func (s *sim) believedLeft(r *running) float64 {
	if s.opts.Robustness.RuntimeSigma == 0 {
		return r.rem / r.rate
	}
	// the caller asks only of jobs that declared a run time
	return queue.Left(queue.Seconds(s.declared(r.job)*r.startRem/r.job.Steps), queue.Seconds(s.now-r.started),
		queue.Seconds(r.out.SharedLoss-r.lossAtStart), r.rate/r.iso).Seconds()
}
