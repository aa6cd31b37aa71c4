package interference

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Profile is how much of one GPU a job uses when it runs alone.
type Profile struct {
	// Name is the profile's name, or "" for a declared or learned profile.
	Name string `json:"name,omitempty"`
	// SM is the fraction of the GPU's streaming multiprocessors kept busy, 0..1.
	SM float64 `json:"sm_util"`
	// MemBW is the fraction of the GPU's memory bandwidth used, 0..1.
	MemBW float64 `json:"mem_bw"`
	// ID names the job a profile without a Name describes (the service
	// sets its group): what is observed of it is kept apart from other
	// jobs that declare the same fractions, or none (see Key). It takes
	// no part in predictions.
	ID string `json:"id,omitempty"`
}

// Known reports whether the profile carries any information. A job without a
// profile is predicted to neither suffer nor cause interference.
func (p Profile) Known() bool { return p.SM > 0 || p.MemBW > 0 }

// String names the profile for reasons and logs.
func (p Profile) String() string {
	if p.Name != "" {
		return p.Name
	}
	if !p.Known() {
		return "unprofiled"
	}
	return fmt.Sprintf("sm %.2f/bw %.2f", p.SM, p.MemBW)
}

// ErrBadProfile is wrapped by profile validation errors.
var ErrBadProfile = errors.New("invalid interference profile")

// Validate checks that both fractions are within 0..1.
func (p Profile) Validate() error {
	if !(p.SM >= 0 && p.SM <= 1) || !(p.MemBW >= 0 && p.MemBW <= 1) {
		return fmt.Errorf("%w: sm_util %v and mem_bw %v must both be within 0..1", ErrBadProfile, p.SM, p.MemBW)
	}
	return nil
}

// Model predicts normalised throughput of co-located jobs.
type Model struct {
	// Overhead is the fraction of throughput every job loses as soon as it
	// shares a GPU with another profiled job whose demand, added to its own,
	// oversubscribes a resource.
	Overhead float64
	// Profiles are the named profiles, keyed by lower-case name.
	Profiles map[string]Profile
	// Uncertainty is the model's error on pairs it was not fitted on (its
	// cross-validated RMSE): the uncertainty of a prediction nothing was
	// observed for (see Knowledge).
	Uncertainty float64
}

// Default returns the model calibrated on Gavel's V100 co-location data.
func Default() *Model {
	m := &Model{Overhead: gavelOverhead, Uncertainty: gavelUncertainty, Profiles: make(map[string]Profile, len(gavelProfiles))}
	for _, p := range gavelProfiles {
		m.Profiles[strings.ToLower(p.Name)] = p
	}
	return m
}

// Lookup returns the named profile.
func (m *Model) Lookup(name string) (Profile, bool) {
	p, ok := m.Profiles[strings.ToLower(strings.TrimSpace(name))]
	return p, ok
}

// Names returns the names of the model's profiles, sorted.
func (m *Model) Names() []string {
	out := make([]string, 0, len(m.Profiles))
	for _, p := range m.Profiles {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

// Predict returns the normalised throughput (co-located / alone, 0..1] of
// each job when all of jobs share one GPU. Unprofiled jobs get 1 and exert
// no pressure.
func (m *Model) Predict(jobs []Profile) []float64 {
	out := make([]float64, len(jobs))
	m.PredictInto(out, jobs)
	return out
}

// PredictInto is Predict writing into out (len(out) >= len(jobs)); it does
// not allocate for up to 8 jobs.
func (m *Model) PredictInto(out []float64, jobs []Profile) {
	var sm, bw [8]float64
	var smS, bwS []float64
	if len(jobs) <= 8 {
		smS, bwS = sm[:len(jobs)], bw[:len(jobs)]
	} else {
		smS, bwS = make([]float64, len(jobs)), make([]float64, len(jobs))
	}
	for i, p := range jobs {
		smS[i], bwS[i] = p.SM, p.MemBW
	}
	for i := range jobs {
		out[i] = 1
	}
	contended := waterFill(out, smS)
	contended = waterFill(out, bwS) || contended
	if contended {
		for i, p := range jobs {
			if p.Known() {
				out[i] *= 1 - m.Overhead
			}
		}
	}
}

// waterFill shares a capacity of 1 between demands by max-min fairness and
// lowers out[i] to the fraction of its demand job i gets. It reports whether
// the demands oversubscribed the capacity.
func waterFill(out, demand []float64) bool {
	total := 0.0
	for _, d := range demand {
		total += d
	}
	if total <= 1 {
		return false
	}
	// Raise a common level until the capacity is used: jobs below the level
	// get their demand, the rest get the level.
	var idx [8]int
	order := idx[:0]
	if len(demand) > 8 {
		order = make([]int, 0, len(demand))
	}
	for i, d := range demand {
		if d > 0 {
			order = append(order, i)
		}
	}
	for a := 1; a < len(order); a++ { // insertion sort: no allocation
		for b := a; b > 0 && demand[order[b]] < demand[order[b-1]]; b-- {
			order[b], order[b-1] = order[b-1], order[b]
		}
	}
	left, n := 1.0, len(order)
	for k, i := range order {
		level := left / float64(n-k)
		if demand[i] <= level {
			left -= demand[i]
			continue
		}
		for _, j := range order[k:] {
			out[j] = math.Min(out[j], level/demand[j])
		}
		break
	}
	return true
}

// Slowdown is 1 - normalised throughput.
func Slowdown(norm float64) float64 { return 1 - norm }
