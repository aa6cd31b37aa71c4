package openb

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/shoenig/test/must"
)

// TestDeviceContracts replays gpushare under the three device contracts
// (docs/device-contract.md) on the openb traces with most multi-GPU pods
// and least: the default contract decides exactly as Replay; one group per
// GPU places no multi-GPU pod; leaving the GPU to Nomad changes GPUs the
// scheduler chose for fractions, at random or, under a fixed affinity on
// the GPU's index, the lowest-indexed with room. The figures (placed pods, allocation ratio at 100% and
// 130% of arrived demand) are logged for the docs.
func TestDeviceContracts(t *testing.T) {
	d := Embedded()
	nodes, err := d.Nodes()
	must.NoError(t, err)
	for _, trace := range []string{"default", "multigpu50"} {
		pods, err := d.Pods(trace)
		must.NoError(t, err)
		w := Generate(nodes, pods, 42, Tune)
		mix := Mix(pods, DefaultGpushareCoverage)
		multi := 0
		for _, p := range w.Pods {
			if p.NumGPU > 1 {
				multi++
			}
		}
		base, err := Replay(trace, placement.PolicyGpushare, 42, nodes, w, mix, nil)
		must.NoError(t, err)
		res := map[string]*Result{}
		for _, c := range Contracts {
			r, err := ReplayContract(trace, placement.PolicyGpushare, c, 42, nodes, w, mix)
			must.NoError(t, err)
			res[c] = r
			t.Logf("%s, contract %-8s: %d of %d pods placed (%d of %d multi-GPU), allocation %.2f%% at 100%% and %.2f%% at 130%% of demand",
				trace, c, r.Placed, r.Pods, r.MultiGPU, multi, r.Alloc[100], r.Alloc[130])
		}
		must.Eq(t, base.Placed, res[ContractModel].Placed)
		must.Eq(t, base.Alloc, res[ContractModel].Alloc)
		must.Positive(t, multi)
		must.Positive(t, res[ContractModel].MultiGPU)
		must.Zero(t, res[ContractGPU].MultiGPU)
		must.Zero(t, res[ContractGPUNode].MultiGPU)
		must.Zero(t, res[ContractGPUNodeFirst].MultiGPU)
		if trace == "default" { // multigpu50 asks for whole GPUs only: any idle GPU is as good
			must.NotEq(t, res[ContractGPU].Alloc, res[ContractGPUNode].Alloc, must.Sprint("Nomad's choice of GPU changed nothing"))
		}
	}
	_, err = ReplayContract("default", placement.PolicyGpushare, "per-gpu", 42, nodes, Workload{}, placement.Mix{})
	must.ErrorContains(t, err, `device contract "per-gpu"`)
}
