package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

const (
	a100MIGGPU = "GPU-a2000000-0000-4000-8000-000000000000"
	a100MIG3g  = "MIG-a2000000-0000-4000-8000-000000000001"
)

// TestMIG runs a node with two MIG-enabled A100s (fixtures/a100-mig.hcl)
// beside a DGX-1 node of whole GPUs: a 3g.20gb job and two 1g.5gb jobs run
// at once on the instances of the first A100, Nomad placing them by the
// device name; a 2-GPU job goes, through the gpushare scheduler, to whole
// GPUs of the DGX-1, since MIG-enabled GPUs offer no shares.
func TestMIG(t *testing.T) {
	fx := t.TempDir()
	a100, err := fixtures.WriteTo(fixtures.A100MIG, fx)
	must.NoError(t, err)
	dgx1, err := fixtures.WriteTo(fixtures.DGX1V100, fx)
	must.NoError(t, err)
	c := startClusterWith(t, devcluster.Options{Persistent: true, Clients: []devcluster.Client{
		// the fixture's own layout: the plugin finds it in place (a
		// fixture cannot change layouts); Nomad's agent parses the block
		{Name: "a100", Fixture: a100, PluginConfig: `mig {
  "NVIDIA A100-SXM4-40GB" = ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]
}`}, {Name: "dgx1", Fixture: dgx1},
	}})
	e := envOn(t, c, map[string]string{"a100": a100, "dgx1": dgx1}, "gpushare-mig-")

	t.Run("the mig block reaches the plugin through Nomad", func(t *testing.T) {
		logs, err := filepath.Glob(filepath.Join(c.Dir(), "a100", "*.log"))
		must.NoError(t, err)
		var all string
		for _, l := range logs {
			b, err := os.ReadFile(l)
			must.NoError(t, err)
			all += string(b)
		}
		must.StrContains(t, all, "MIG layout in place")
		must.StrContains(t, all, "the gpu source cannot change MIG layouts")
	})

	t.Run("the A100 node offers its instances by profile and no shares", func(t *testing.T) {
		node := nodeNamed(t, e.nomad, "a100")
		byName := map[string]*api.NodeDeviceResource{}
		for _, d := range node.NodeResources.Devices {
			byName[d.Vendor+"/"+d.Type+"/"+d.Name] = d
		}
		must.MapLen(t, 4, byName)
		g := byName["nvidia/gpushare-mig/1g.5gb"]
		must.NotNil(t, g)
		must.SliceLen(t, 2, g.Instances)
		must.Eq(t, "1g.5gb", *g.Attributes["profile"].StringVal)
		must.Eq(t, a100MIGGPU, *g.Attributes["mig0.parent_uuid"].StringVal)
		must.NotNil(t, byName["nvidia/gpushare-mig/3g.20gb"])
		must.NotNil(t, byName["nvidia/gpushare-mig/7g.40gb"])
	})

	// migJob runs testdata/mig.nomad.hcl asking for a profile, or with
	// device the whole device block's opening instead
	migJob := func(id, profile string, device ...string) {
		src, err := os.ReadFile(filepath.Join("testdata", "mig.nomad.hcl"))
		must.NoError(t, err)
		hcl := strings.Replace(string(src), "PROFILE", profile, 1)
		if len(device) > 0 {
			hcl = strings.Replace(string(src), `device "nvidia/gpushare-mig/PROFILE" {`, device[0], 1)
		}
		job, err := e.nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Canonicalize: true})
		must.NoError(t, err)
		job.ID, job.Name = &id, &id
		_, _, err = e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		t.Cleanup(func() { e.purge(id) })
	}

	t.Run("a 3g.20gb job and two 1g.5gb jobs share one A100", func(t *testing.T) {
		migJob("mig-3g", "3g.20gb")
		migJob("mig-1g-a", "1g.5gb")
		migJob("mig-1g-b", "1g.5gb")
		seen := map[string]string{}
		for _, id := range []string{"mig-3g", "mig-1g-a", "mig-1g-b"} {
			a := e.running(id, 1, 60*time.Second)[0]
			ids := allocatedIDs(a)
			must.SliceLen(t, 1, ids, must.Sprintf("%s: %v", id, ids))
			must.StrHasPrefix(t, "MIG-", ids[0])
			if other, dup := seen[ids[0]]; dup {
				t.Fatalf("%s and %s hold the same instance %s", id, other, ids[0])
			}
			seen[ids[0]] = id
			env := taskEnvOf(t, e, a, "work")
			must.Eq(t, ids[0], env["NVIDIA_VISIBLE_DEVICES"])
			must.Eq(t, ids[0], env["CUDA_VISIBLE_DEVICES"])
			must.Eq(t, a100MIGGPU, env["GPUSHARE_MIG_PARENT"], must.Sprint(id))
			must.Eq(t, "mig", env["GPUSHARE_SHARING"])
			if id == "mig-3g" {
				must.Eq(t, a100MIG3g, ids[0])
				must.Eq(t, "3g.20gb", env["GPUSHARE_MIG_PROFILE"])
				must.Eq(t, "19968", env["GPUSHARE_MEMORY_MIB"])
			} else {
				must.Eq(t, "1g.5gb", env["GPUSHARE_MIG_PROFILE"])
			}
		}
	})

	t.Run("an instance asked for by memory, as in the README", func(t *testing.T) {
		migJob("mig-big", "", `device "nvidia/gpushare-mig" {
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "30 GiB"
          }`)
		a := e.running("mig-big", 1, 60*time.Second)[0]
		must.Eq(t, []string{"MIG-a2000000-0000-4000-8000-000000000011"}, allocatedIDs(a))
		must.Eq(t, "7g.40gb", taskEnvOf(t, e, a, "work")["GPUSHARE_MIG_PROFILE"])
	})

	t.Run("a 2-GPU job gets whole GPUs of the DGX-1", func(t *testing.T) {
		e.startScheduler("s1", "")
		e.register("two-gpus", map[string]any{"shares": 200})
		t.Cleanup(func() { e.purge("two-gpus") })
		a := e.running("two-gpus", 1, 90*time.Second)[0]
		must.Eq(t, nodeNamed(t, e.nomad, "dgx1").ID, a.NodeID)
		g := gpus(a)
		must.SliceLen(t, 2, g)
		must.SliceLen(t, 200, allocatedIDs(a))
		env := taskEnvOf(t, e, a, "work")
		must.Eq(t, "2", env["GPUSHARE_FRACTION"])
		must.Eq(t, strings.Join(g, ","), env["CUDA_VISIBLE_DEVICES"])
	})

	t.Run("gpushare status shows the instances under their GPU", func(t *testing.T) {
		out, err := exec.Command(cliBin, "status", "-address", e.c.Address(), "-scheduler", e.scheds[0].http).CombinedOutput()
		must.NoError(t, err, must.Sprint(string(out)))
		must.StrContains(t, string(out), "2 x NVIDIA A100-SXM4-40GB  sharing=mig  12/14 MIG slices used")
		must.StrContains(t, string(out), "    MIG 3g.20gb    "+a100MIG3g+"  mig-3g/g[")
		must.StrContains(t, string(out), "    MIG 2g.10gb    MIG-a2000000-0000-4000-8000-000000000002  free")
		must.StrContains(t, string(out), "cluster: 12/14 MIG slices used")
		must.StrContains(t, string(out), "/800 shares used") // the DGX-1, shared as ever
		// the scheduler's layout for the instances asked for, with what to do
		must.StrContains(t, string(out), "MIG layout for NVIDIA A100-SXM4-40GB: now ")
		must.StrContains(t, string(out), "demand: ")
	})
}

func nodeNamed(t *testing.T, nomad *api.Client, name string) *api.Node {
	t.Helper()
	nodes, _, err := nomad.Nodes().List(nil)
	must.NoError(t, err)
	for _, n := range nodes {
		if n.Name == name {
			node, _, err := nomad.Nodes().Info(n.ID, nil)
			must.NoError(t, err)
			return node
		}
	}
	t.Fatalf("no node named %s", name)
	return nil
}
