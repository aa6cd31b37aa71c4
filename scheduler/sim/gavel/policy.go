package gavel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/placement"
)

// Policies compared by default, in report order.
var Policies = []string{"exclusive", "hived", "packing", "sjf-bsbf", "gpushare", "gpushare-fifo"}

// PolicyInfo describes each policy.
var PolicyInfo = map[string]string{
	"exclusive": "no sharing, FIFO; whole GPUs by best-fit",
	"hived":     "no sharing, FIFO; whole GPUs in the lowest free topology cell (placement policy hived)",
	"packing":   "interference-oblivious: a single-GPU job shares a GPU whenever half of one is free (gpu-packing), FIFO",
	"sjf-bsbf":  "shortest job first; a job takes a free GPU, else pairs with the running job whose predicted concurrent completion beats waiting by the most (measured throughputs)",
	"gpushare": "the scheduler service's own decision step (decide.Step), its actions executed on the simulated cluster: highest response ratio first ((wait + expected run time) / expected run time, run times declared exactly as SJF-BSBF knows them); " +
		"a multi-GPU job that cannot start holds the servers that free first for it when they free within its own run time, and other jobs use them only if they end before (backfilling); " +
		"a single-GPU job (half a GPU's shares) takes an idle GPU while one is free (idle_gpu_first), else shares one when SJF-BSBF's rule says sharing beats waiting for the GPU that frees for it behind the jobs waiting ahead, " +
		"and it would not end later, at the throughput one uncertainty below its prediction, than waiting and running alone (with -bounded-cost, also when that gain exceeds what the pairing costs if it is that bad, bounded by introspection's window); " +
		"never on a GPU whose job sharing has already cost more than 0.4 of its run time alone (-max-stretch); the placement core (policy gpushare) finds a partner whose predicted slowdown plus the uncertainty stays within both jobs' bound (with -bounded-cost, the predicted slowdown alone); " +
		"pairs are observed 10 minutes after they form: a pair where a job is slower than its bound, or that is slower summed over both jobs than one after the other, is unpaired (the newer job waits again, losing its work since it started) and not formed again on that GPU model; " +
		"observations refine the predictions of the pair and its jobs, and of every pair on that GPU model: the model's mean error there shifts them and its spread is their uncertainty",
	"gpushare-fifo": "ablation: the same step with no run times declared (first come, first served) and reservations off",
	"gpushare-bounded": "variant (not run by default; issue 46): gpushare ordered shortest expected run time first, with every job's wait bounded: a job whose wait reaches its start in a shadow schedule of the same arrivals on the same cluster run exclusively, first come first served, at the declared run times (queue.Shadow), " +
		"goes before every job that has not, in arrival order, and the first of them that does not fit holds the servers that free first however long they take",
}

type shareMode int

const (
	shareNever  shareMode = iota
	shareAlways           // oblivious packing
	shareBSBF             // SJF-BSBF pairing rule
	shareModel            // the service's decision step (decide.Step)
)

// queueOrder is the order in which a policy serves its queue.
type queueOrder int

const (
	orderFIFO queueOrder = iota // arrival order
	orderSJF                    // isolated run time, shortest first (SJF-BSBF)
)

type policySpec struct {
	core  string
	share shareMode
	order queueOrder
	// reserve declares run times and turns the step's reservations on
	// (shareModel only).
	reserve bool
	// bounded orders the step's queue shortest first with every job's
	// wait bounded by an exclusive FCFS shadow (decide.Config.ShortestFirst,
	// queue.Shadow.Bound; shareModel with reserve only).
	bounded bool
}

var specs = map[string]policySpec{
	"exclusive":        {core: placement.PolicyBestFit},
	"hived":            {core: placement.PolicyHived},
	"packing":          {core: placement.PolicyGPUPacking, share: shareAlways},
	"sjf-bsbf":         {core: placement.PolicyBestFit, share: shareBSBF, order: orderSJF},
	"gpushare":         {core: placement.PolicyGpushare, share: shareModel, reserve: true},
	"gpushare-fifo":    {core: placement.PolicyGpushare, share: shareModel},
	"gpushare-bounded": {core: placement.PolicyGpushare, share: shareModel, reserve: true, bounded: true},
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
