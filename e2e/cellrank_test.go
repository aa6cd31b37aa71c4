package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestCellOrderOnPerGPUDGX1: on a DGX-1 V100 client whose plugin offers
// each GPU as a device group of its own and composes several in one task
// (device_groups = "gpu", the interposer), through the real Nomad, plugin
// and scheduler. The plugin fingerprints each GPU's rank in the node's
// cell order (cell_rank: GPUs 0, 3, 1, 2, 4, 7, 5, 6 have ranks 0..7); a
// new node pin writes the cell-rank affinities, so Nomad gives a group of
// two whole GPUs the double-NVLink pair {0,3}, not {0,1} (one NVLink), and
// the next such group {1,2}. A group whose device block carries the index
// affinities of an older pin keeps them, and Nomad gives it the lowest
// free indexes, {4,5}; a fraction then goes to GPU 7 (rank 5), before GPU
// 6 (rank 7). GPUs are checked by UUID.
func TestCellOrderOnPerGPUDGX1(t *testing.T) {
	bin := buildInterposer(t)
	cfg := fmt.Sprintf("device_groups = %q\nsharing = %q\ninterposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n}\n",
		devicefn.DeviceGroupsGPU, devicefn.SharingTimeslice, filepath.Join(bin, "libgpushare-cuda.so"), filepath.Join(bin, "reservations"))
	e, uuids := newDGX1Env(t, "gpushare-cellrank-", 90, cfg)
	s := e.startScheduler("s1", "")
	const model = "Tesla V100-SXM2-16GB"

	// the fingerprint: each GPU's cell rank
	ranks := []int64{0, 2, 3, 1, 4, 6, 7, 5}
	e.eventually(liveness, "the client's per-GPU groups with cell ranks", func() bool {
		stubs, _, err := e.nomad.Nodes().List(nil)
		if err != nil || len(stubs) != 1 {
			return false
		}
		n, _, err := e.nomad.Nodes().Info(stubs[0].ID, nil)
		if err != nil || n.NodeResources == nil {
			return false
		}
		seen := 0
		for _, d := range n.NodeResources.Devices {
			for i := range ranks {
				if d.Name == devicefn.GPUGroupName(model, i) {
					r := d.Attributes[devicefn.AttrCellRank]
					must.NotNil(t, r, must.Sprintf("%s has no cell_rank", d.Name))
					must.Eq(t, ranks[i], *r.IntVal, must.Sprint(d.Name))
					seen++
				}
			}
		}
		return seen == len(ranks)
	})

	run := func(id string, shares int, affinities []*api.Affinity) []string {
		t.Helper()
		j := e.parse(id, map[string]any{"shares": shares, "model": model})
		j.TaskGroups[0].Tasks[0].Resources.Devices[0].Affinities = affinities
		e.registerJob(j)
		t.Cleanup(func() { e.stopJobs(id) })
		allocs, ok, why := e.settledOr(s, id, 1, "")
		must.True(t, ok, must.Sprint(why))
		got := gpus(allocs[0])
		slices.Sort(got)
		pinned, _, err := e.nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		rec, ok := pin.ParseRecord(pinned, "g")
		must.True(t, ok)
		must.Eq(t, pin.ContractNode, rec.Contract)
		t.Logf("RESULT %s (%d shares): GPUs %v, rank affinities %v, index affinities %v", id, shares, got,
			pin.HasRankAffinities(pinned.TaskGroups[0]), pin.HasIndexAffinities(pinned.TaskGroups[0]))
		return got
	}
	of := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, uuids[i])
		}
		slices.Sort(out)
		return out
	}

	must.Eq(t, of(0, 3), run("pair-a", 200, nil), must.Sprint("the double-NVLink pair first in cell order"))
	must.Eq(t, of(1, 2), run("pair-b", 200, nil))

	// an older pin's index affinities, as it wrote them: kept, by index
	var index []*api.Affinity
	for k := range pin.IndexAffinities {
		index = append(index, &api.Affinity{LTarget: pin.IndexAttribute, Operand: "<=", RTarget: strconv.Itoa(k), Weight: ptr(int8(pin.IndexAffinityWeight))})
	}
	must.Eq(t, of(4, 5), run("pair-old", 200, index), must.Sprint("the lowest free indexes"))
	old, _, err := e.nomad.Jobs().Info("pair-old", nil)
	must.NoError(t, err)
	must.True(t, pin.HasIndexAffinities(old.TaskGroups[0]))
	must.False(t, pin.HasRankAffinities(old.TaskGroups[0]))
	for _, d := range old.TaskGroups[0].Tasks[0].Resources.Devices {
		must.Eq(t, index, d.Affinities, must.Sprint("the older pin's affinities byte for byte"))
	}

	must.Eq(t, of(7), run("frac", 30, nil), must.Sprint("GPU 7 (rank 5) before GPU 6 (rank 7)"))
}

// newDGX1Env starts one client, "dgx1-1", serving a DGX-1 V100 fixture
// whose GPU UUIDs are made unique by first, with pluginConfig; it returns
// the env and the GPUs' UUIDs by NVML index.
func newDGX1Env(t *testing.T, prefix string, first int, pluginConfig string) (*env, []string) {
	t.Helper()
	src, err := fixtures.FS.ReadFile(fixtures.DGX1V100)
	must.NoError(t, err)
	b := fixtureUUID.ReplaceAllString(string(src), fmt.Sprintf("GPU-${1}${2}0000%02d-", first))
	p := filepath.Join(t.TempDir(), "dgx1-1.hcl")
	must.NoError(t, os.WriteFile(p, []byte(b), 0o644))
	st, err := fixture.Parse(p, []byte(b))
	must.NoError(t, err)
	uuids := make([]string, len(st.Inventory.GPUs))
	for _, g := range st.Inventory.GPUs {
		uuids[g.Index] = g.UUID
	}
	clients := []devcluster.Client{{Name: "dgx1-1", Fixture: p, Datacenter: "dc1", PluginConfig: pluginConfig}}
	return envOn(t, startClusterWith(t, devcluster.Options{Clients: clients}), map[string]string{"dgx1-1": p}, prefix), uuids
}
