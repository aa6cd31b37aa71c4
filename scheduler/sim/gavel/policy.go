package gavel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// Policies compared by default, in report order.
var Policies = []string{"exclusive", "hived", "packing", "sjf-bsbf", "gpushare", "gpushare-fifo", "gpushare-gain"}

// PolicyInfo describes each policy.
var PolicyInfo = map[string]string{
	"exclusive": "no sharing, FIFO; whole GPUs by best-fit",
	"hived":     "no sharing, FIFO; whole GPUs in the lowest free topology cell (placement policy hived)",
	"packing":   "interference-oblivious: a single-GPU job shares a GPU whenever half of one is free (gpu-packing), FIFO",
	"sjf-bsbf":  "shortest job first; a job takes a free GPU, else pairs with the running job whose predicted concurrent completion beats waiting by the most (measured throughputs)",
	"gpushare": "the scheduler service's logic: highest response ratio first ((wait + expected run time) / expected run time, run times known in advance as for SJF-BSBF); " +
		"a multi-GPU job that cannot start holds the servers that free first for it when they free within its own run time, and other jobs use them only if they end before (backfilling); " +
		"a single-GPU job takes a free GPU, else the placement core (policy gpushare) pairs it by predicted interference within both jobs' slowdown bound",
	"gpushare-fifo": "ablation: gpushare's placement and pairing in FIFO order, without reservations",
	"gpushare-gain": "ablation: gpushare with a pairing rule of the simulator's own: a single-GPU job pairs with the running job whose pairing saves the most summed completion time over waiting for the next GPU, " +
		"within both jobs' slowdown bound as predicted by the interference model, or as observed once the two job types have shared",
}

type shareMode int

const (
	shareNever  shareMode = iota
	shareAlways           // oblivious packing
	shareBSBF             // SJF-BSBF pairing rule
	shareModel            // the placement core's interference-aware pairing
	shareGain             // gpushare-gain: pairs by predicted interference and saved completion time
)

// queueOrder is the order in which a policy serves its queue.
type queueOrder int

const (
	orderFIFO queueOrder = iota // arrival order
	orderSJF                    // isolated run time, shortest first (SJF-BSBF)
	orderHRRN                   // highest response ratio first
)

type policySpec struct {
	core  string
	share shareMode
	order queueOrder
	// reserve holds servers for a waiting multi-GPU job (see reserveFor).
	reserve bool
}

var specs = map[string]policySpec{
	"exclusive":     {core: placement.PolicyBestFit},
	"hived":         {core: placement.PolicyHived},
	"packing":       {core: placement.PolicyGPUPacking, share: shareAlways},
	"sjf-bsbf":      {core: placement.PolicyBestFit, share: shareBSBF, order: orderSJF},
	"gpushare":      {core: placement.PolicyGpushare, share: shareModel, order: orderHRRN, reserve: true},
	"gpushare-gain": {core: placement.PolicyGpushare, share: shareGain, order: orderHRRN, reserve: true},
	"gpushare-fifo": {core: placement.PolicyGpushare, share: shareModel},
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
