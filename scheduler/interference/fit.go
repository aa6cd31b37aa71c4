package interference

import (
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Pair is one measured co-location of two jobs on one GPU.
type Pair struct {
	A, B string
	// NormA and NormB are the measured normalised throughputs (co-located /
	// alone). Both are 0 when the pair could not share a GPU at all.
	NormA, NormB float64
}

// Fits reports whether the pair could share a GPU in the measurement.
func (p Pair) Fits() bool { return p.NormA > 0 || p.NormB > 0 }

// ReadGavelPairs reads Gavel's co-location CSV (columns gpu_type, job_a,
// scale_a, job_b, scale_b, iso_thr_a, iso_thr_b, coloc_thr_a, coloc_thr_b,
// norm_a, norm_b). Lines starting with '#' are comments.
func ReadGavelPairs(r io.Reader) ([]Pair, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = 11
	var out []Pair
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("gavel pairs: %w", err)
		}
		if rec[0] == "gpu_type" {
			continue
		}
		na, errA := strconv.ParseFloat(rec[9], 64)
		nb, errB := strconv.ParseFloat(rec[10], 64)
		if errA != nil || errB != nil || na < 0 || nb < 0 || na > 2 || nb > 2 {
			return nil, fmt.Errorf("gavel pairs record %d: norm_a %q and norm_b %q must be numbers within 0..2", line, rec[9], rec[10])
		}
		out = append(out, Pair{A: rec[1], B: rec[3], NormA: na, NormB: nb})
	}
}

// Split divides pairs into a training and a held-out set by a hash of the
// unordered pair of names, so that (a, b) and (b, a) land on the same side.
// About one pair in every `every` is held out.
func Split(pairs []Pair, every uint32) (train, test []Pair) { return Fold(pairs, every, 0) }

// Fold is fold i of a k-fold split by the same hash as Split.
func Fold(pairs []Pair, k, i uint32) (train, test []Pair) {
	for _, p := range pairs {
		a, b := p.A, p.B
		if b < a {
			a, b = b, a
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(a + "\x00" + b))
		if k > 0 && h.Sum32()%k == i {
			test = append(test, p)
		} else {
			train = append(train, p)
		}
	}
	return train, test
}

// Error summarises prediction errors of normalised throughput.
type Error struct {
	// Jobs is the number of predictions (two per pair).
	Jobs int
	// MAE is the mean absolute error; RMSE the root mean square error.
	MAE, RMSE float64
	// BaselineMAE is the MAE of always predicting no slowdown (1.0).
	BaselineMAE float64
}

func (e Error) String() string {
	return fmt.Sprintf("%d predictions: MAE %.4f, RMSE %.4f (predicting no slowdown: MAE %.4f)", e.Jobs, e.MAE, e.RMSE, e.BaselineMAE)
}

// Evaluate measures the model's error on the pairs that could share a GPU.
// Jobs without a named profile in the model are skipped.
func (m *Model) Evaluate(pairs []Pair) Error {
	var e Error
	var out [2]float64
	for _, p := range pairs {
		pa, okA := m.Lookup(p.A)
		pb, okB := m.Lookup(p.B)
		if !p.Fits() || !okA || !okB {
			continue
		}
		m.PredictInto(out[:], []Profile{pa, pb})
		for i, want := range [2]float64{p.NormA, p.NormB} {
			d := out[i] - min(want, 1)
			e.MAE += math.Abs(d)
			e.RMSE += d * d
			e.BaselineMAE += math.Abs(1 - min(want, 1))
			e.Jobs++
		}
	}
	if e.Jobs > 0 {
		e.MAE /= float64(e.Jobs)
		e.RMSE = math.Sqrt(e.RMSE / float64(e.Jobs))
		e.BaselineMAE /= float64(e.Jobs)
	}
	return e
}

// Fit calibrates one profile per job name and the model's overhead on the
// pairs that could share a GPU, minimising the sum of absolute errors of the
// normalised throughput by coordinate descent over a grid of step 0.01. It
// is deterministic.
func Fit(pairs []Pair) *Model {
	names := map[string]bool{}
	var fit []Pair
	for _, p := range pairs {
		if p.Fits() {
			fit = append(fit, p)
			names[p.A], names[p.B] = true, true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)

	m := &Model{Profiles: map[string]Profile{}}
	for _, n := range sorted {
		m.Profiles[strings.ToLower(n)] = Profile{Name: n, SM: 0.5, MemBW: 0.5}
	}
	// Pairs touching each name, to re-score only those when it moves.
	touch := map[string][]Pair{}
	for _, p := range fit {
		touch[p.A] = append(touch[p.A], p)
		if p.B != p.A {
			touch[p.B] = append(touch[p.B], p)
		}
	}
	loss := func(ps []Pair) float64 {
		var out [2]float64
		s := 0.0
		for _, p := range ps {
			pa, _ := m.Lookup(p.A)
			pb, _ := m.Lookup(p.B)
			m.PredictInto(out[:], []Profile{pa, pb})
			s += math.Abs(out[0]-min(p.NormA, 1)) + math.Abs(out[1]-min(p.NormB, 1))
		}
		return s
	}
	const steps = 100
	for sweep := 0; sweep < 6; sweep++ {
		bestO, bestL := m.Overhead, loss(fit)
		for o := 0; o <= 30; o++ {
			m.Overhead = float64(o) / steps
			if l := loss(fit); l < bestL-1e-12 {
				bestO, bestL = m.Overhead, l
			}
		}
		m.Overhead = bestO
		for _, n := range sorted {
			key := strings.ToLower(n)
			for dim := 0; dim < 2; dim++ {
				cur := m.Profiles[key]
				best, bestL := cur, loss(touch[n])
				for v := 0; v <= steps; v++ {
					try := cur
					if dim == 0 {
						try.SM = float64(v) / steps
					} else {
						try.MemBW = float64(v) / steps
					}
					m.Profiles[key] = try
					if l := loss(touch[n]); l < bestL-1e-12 {
						best, bestL = try, l
					}
				}
				m.Profiles[key] = best
			}
		}
	}
	return m
}

// Observation is one sample of a job's GPU counters while it ran alone, as
// the plugin's stats report them.
type Observation struct {
	SMUtilPct  float64
	MemUtilPct float64
}

// Learn derives a profile from samples of a job running alone: the mean
// utilisation of each resource. It returns false when there are no samples.
func Learn(obs []Observation) (Profile, bool) {
	if len(obs) == 0 {
		return Profile{}, false
	}
	var p Profile
	for _, o := range obs {
		p.SM += clamp01(o.SMUtilPct / 100)
		p.MemBW += clamp01(o.MemUtilPct / 100)
	}
	p.SM /= float64(len(obs))
	p.MemBW /= float64(len(obs))
	return p, true
}

func clamp01(v float64) float64 {
	if !(v > 0) {
		return 0
	}
	return min(v, 1)
}
