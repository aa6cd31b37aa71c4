package openb

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxDemand is the last bin: arrived GPU demand of 130% of capacity.
const MaxDemand = 130

// Curve is a GPU allocation ratio (%) per bin of arrived demand (0..130%);
// NaN where the bin is empty.
type Curve [MaxDemand + 1]float64

// NewCurve returns a curve with every bin empty.
func NewCurve() Curve {
	var c Curve
	for i := range c {
		c[i] = math.NaN()
	}
	return c
}

// Published holds the FGD authors' curves by trace, then FGD policy name
// ("Random", "BestFit", "GpuPacking", "FGD", ...), then seed.
type Published map[string]map[string]map[int]Curve

// FGDName maps our baseline names to the FGD simulator's policy names.
var FGDName = map[string]string{
	"random": "Random", "best-fit": "BestFit", "gpu-packing": "GpuPacking", "fgd": "FGD",
}

// Mean returns the published mean over seeds at a bin, and the seed count.
func (p Published) Mean(trace, fgdPolicy string, bin int) (float64, int) {
	sum, n := 0.0, 0
	curves := p[trace][fgdPolicy]
	for _, seed := range slices.Sorted(maps.Keys(curves)) { // one summation order: the same mean to the last bit
		if c := curves[seed]; !math.IsNaN(c[bin]) {
			sum += c[bin]
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return sum / float64(n), n
}

// ReadPublished parses fgd_published_alloc_ratio.csv: workload, sc_policy,
// tune, seed, total_gpus and one column per bin 0..130. Workloads are
// named by trace ("openb_pod_list_default" becomes "default") and policies
// lose their number prefix ("06-FGD" becomes "FGD").
func ReadPublished(r io.Reader) (Published, error) {
	rows, err := table(r, "workload", "sc_policy", "seed", "0", strconv.Itoa(MaxDemand))
	if err != nil {
		return nil, err
	}
	out := Published{}
	for i, m := range rows {
		trace := strings.TrimPrefix(m["workload"], "openb_pod_list_")
		pol := m["sc_policy"]
		if k := strings.IndexByte(pol, '-'); k >= 0 {
			pol = pol[k+1:]
		}
		seed, err := strconv.Atoi(m["seed"])
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: seed %q", ErrFormat, i+2, m["seed"])
		}
		c := NewCurve()
		for b := range c {
			v := m[strconv.Itoa(b)]
			if v == "" {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: bin %d: %q", ErrFormat, i+2, b, v)
			}
			c[b] = f
		}
		if out[trace] == nil {
			out[trace] = map[string]map[int]Curve{}
		}
		if out[trace][pol] == nil {
			out[trace][pol] = map[int]Curve{}
		}
		out[trace][pol][seed] = c
	}
	return out, nil
}
