package gavel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// Policies compared by default, in report order.
var Policies = []string{"exclusive", "hived", "packing", "sjf-bsbf", "gpushare", "gpushare-sjf"}

// PolicyInfo describes each policy.
var PolicyInfo = map[string]string{
	"exclusive":    "no sharing, FIFO; whole GPUs by best-fit",
	"hived":        "no sharing, FIFO; whole GPUs in the lowest free topology cell (placement policy hived)",
	"packing":      "interference-oblivious: a single-GPU job shares a GPU whenever half of one is free (gpu-packing), FIFO",
	"sjf-bsbf":     "shortest job first; a job takes a free GPU, else pairs with the running job whose predicted concurrent completion beats waiting by the most (measured throughputs)",
	"gpushare":     "FIFO; a job takes a free GPU, else the placement core pairs it by predicted interference within its slowdown bound (policy gpushare)",
	"gpushare-sjf": "ablation: gpushare's placement and pairing with SJF-BSBF's queue order (shortest job first, job lengths known in advance)",
}

type shareMode int

const (
	shareNever  shareMode = iota
	shareAlways           // oblivious packing
	shareBSBF             // SJF-BSBF pairing rule
	shareModel            // the placement core's interference-aware pairing
)

type policySpec struct {
	core  string
	share shareMode
	sjf   bool
}

var specs = map[string]policySpec{
	"exclusive":    {core: placement.PolicyBestFit},
	"hived":        {core: placement.PolicyHived},
	"packing":      {core: placement.PolicyGPUPacking, share: shareAlways},
	"sjf-bsbf":     {core: placement.PolicyBestFit, share: shareBSBF, sjf: true},
	"gpushare":     {core: placement.PolicyGpushare, share: shareModel},
	"gpushare-sjf": {core: placement.PolicyGpushare, share: shareModel, sjf: true},
}

func specFor(name string) (policySpec, error) {
	s, ok := specs[name]
	if !ok {
		names := make([]string, 0, len(specs))
		for n := range specs {
			names = append(names, n)
		}
		slices.Sort(names)
		return s, fmt.Errorf("unknown gavel policy %q: want one of %s", name, strings.Join(names, ", "))
	}
	return s, nil
}

// pairBenefit is the SJF-BSBF rule: the saving in the two jobs' summed
// completion times (from now) when job j (alone: tj seconds) shares the GPU
// of running job r (alone: tr seconds left) at normalised throughputs nj and
// nr, instead of waiting for r to finish. Positive means pairing wins.
func pairBenefit(tr, tj, nr, nj float64) float64 {
	wait := tr + (tr + tj)
	var pair float64
	if a := tr / nr; a <= tj/nj {
		pair = a + a + (tj - a*nj) // r first; j finishes alone
	} else {
		b := tj / nj
		pair = b + b + (tr - b*nr)
	}
	return wait - pair
}
