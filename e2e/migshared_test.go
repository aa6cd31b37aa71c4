package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestMIGShared runs the A100 node of fixtures/a100-mig.hcl with the
// plugin's mig_instances = "shared" beside a DGX-1 of whole V100s: the MIG
// instances are GPUs of nvidia/gpushare of their own size, and the gpushare
// scheduler places ordinary fractional requests on them. A request that
// fills an instance exactly goes there rather than to an idle V100; a
// 2-GPU request goes to whole V100s, never to instances, not even to the
// 7g.40gb one.
func TestMIGShared(t *testing.T) {
	fx := t.TempDir()
	a100, err := fixtures.WriteTo(fixtures.A100MIG, fx)
	must.NoError(t, err)
	dgx1, err := fixtures.WriteTo(fixtures.DGX1V100, fx)
	must.NoError(t, err)
	c := startClusterWith(t, devcluster.Options{Persistent: true, Clients: []devcluster.Client{
		{Name: "a100", Fixture: a100, PluginConfig: `mig_instances = "shared"`},
		{Name: "dgx1", Fixture: dgx1},
	}})
	e := envOn(t, c, map[string]string{"a100": a100, "dgx1": dgx1}, "gpushare-migshared-")
	a100ID, dgx1ID := nodeNamed(t, e.nomad, "a100").ID, nodeNamed(t, e.nomad, "dgx1").ID

	t.Run("the instances are shares of nvidia/gpushare", func(t *testing.T) {
		node := nodeNamed(t, e.nomad, "a100")
		byName := map[string]int{}
		for _, d := range node.NodeResources.Devices {
			must.Eq(t, devicefn.DeviceType, d.Type, must.Sprint(d.Name))
			byName[d.Name] = len(d.Instances)
		}
		must.Eq(t, map[string]int{
			"NVIDIA A100-SXM4-40GB MIG 1g.5gb":  2 * 14,
			"NVIDIA A100-SXM4-40GB MIG 2g.10gb": 28,
			"NVIDIA A100-SXM4-40GB MIG 3g.20gb": 42,
			"NVIDIA A100-SXM4-40GB MIG 7g.40gb": 100,
		}, byName)
	})

	e.startScheduler("s1", "")
	// on returns the one MIG instance an allocation's shares are on
	on := func(id string, shares int) (string, map[string]string) {
		a := e.running(id, 1, 90*time.Second)[0]
		must.Eq(t, a100ID, a.NodeID, must.Sprintf("%s runs on the DGX-1", id))
		g := gpus(a)
		must.SliceLen(t, 1, g, must.Sprint(id))
		must.StrHasPrefix(t, "MIG-", g[0])
		must.SliceLen(t, shares, allocatedIDs(a))
		env := taskEnvOf(t, e, a, "work")
		must.Eq(t, g[0], env["CUDA_VISIBLE_DEVICES"], must.Sprint(id))
		must.Eq(t, g[0], env["NVIDIA_VISIBLE_DEVICES"], must.Sprint(id))
		must.Eq(t, a100MIGGPU, env["GPUSHARE_MIG_PARENT"], must.Sprint(id))
		return g[0], env
	}

	t.Run("a request that fills an instance goes there, not to an idle V100", func(t *testing.T) {
		e.register("fills-3g", map[string]any{"shares": 42})
		e.register("fills-2g", map[string]any{"shares": 28})
		t.Cleanup(func() { e.purge("fills-3g", "fills-2g") })
		inst, env := on("fills-3g", 42)
		must.Eq(t, a100MIG3g, inst)
		must.Eq(t, "3g.20gb", env["GPUSHARE_MIG_PROFILE"])
		inst, env = on("fills-2g", 28)
		must.Eq(t, "MIG-a2000000-0000-4000-8000-000000000002", inst)
		must.Eq(t, "2g.10gb", env["GPUSHARE_MIG_PROFILE"])
	})

	t.Run("two 1g.5gb-sized requests take the two 1g instances", func(t *testing.T) {
		e.register("small-a", map[string]any{"shares": 14})
		e.register("small-b", map[string]any{"shares": 14})
		t.Cleanup(func() { e.purge("small-a", "small-b") })
		a, _ := on("small-a", 14)
		b, _ := on("small-b", 14)
		must.NotEq(t, a, b)
		for _, inst := range []string{a, b} {
			must.True(t, inst == "MIG-a2000000-0000-4000-8000-000000000003" || inst == "MIG-a2000000-0000-4000-8000-000000000004", must.Sprint(inst))
		}
	})

	t.Run("a device constraint on the profile is honoured, as Nomad checks it", func(t *testing.T) {
		// 14 shares fill a 1g instance exactly, but the block asks for a 3g
		job := e.parse("profile-3g", map[string]any{"shares": 14})
		dev := job.TaskGroups[0].Tasks[0].Resources.Devices[0]
		dev.Constraints = append(dev.Constraints, &api.Constraint{LTarget: "${device.attr.mig_profile}", Operand: "=", RTarget: "3g.20gb"})
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { e.purge("profile-3g") })
		inst, env := on("profile-3g", 14)
		must.Eq(t, a100MIG3g, inst)
		must.Eq(t, "3g.20gb", env["GPUSHARE_MIG_PROFILE"])
	})

	t.Run("a 2-GPU job gets whole V100s, never instances", func(t *testing.T) {
		e.register("two-gpus", map[string]any{"shares": 200})
		t.Cleanup(func() { e.purge("two-gpus") })
		a := e.running("two-gpus", 1, 90*time.Second)[0]
		must.Eq(t, dgx1ID, a.NodeID)
		must.SliceLen(t, 2, gpus(a))
		for _, g := range gpus(a) {
			must.StrHasPrefix(t, "GPU-", g)
		}
	})

	t.Run("gpushare status shows the instances under their GPU", func(t *testing.T) {
		e.register("status-3g", map[string]any{"shares": 42})
		t.Cleanup(func() { e.purge("status-3g") })
		e.running("status-3g", 1, 90*time.Second)
		out, err := exec.Command(cliBin, "status", "-address", e.c.Address(), "-scheduler", e.scheds[0].http).CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		must.True(t, strings.Contains(string(out), a100MIG3g), must.Sprint(string(out)))
		must.StrContains(t, string(out), "status-3g/g[")
	})
}
