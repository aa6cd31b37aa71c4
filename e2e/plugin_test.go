package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/devcluster"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

const dgx1GPU = "GPU-d1000000-0000-4000-8000-00000000000"

func shareIDs(gpu, from, to int) []string {
	var ids []string
	for k := from; k < to; k++ {
		ids = append(ids, fmt.Sprintf("%s%d:%d", dgx1GPU, gpu, k))
	}
	return ids
}

// TestPlugin runs the device plugin on a dev agent with the DGX-1 V100
// fixture and checks the device contract through Nomad's HTTP API.
func TestPlugin(t *testing.T) {
	fixture, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	c := startCluster(t, devcluster.Client{Name: "dgx1", Fixture: fixture})
	nomad := c.API()
	nodeID := onlyNode(t, nomad)

	t.Run("node shows 8 x 100 healthy shares with topology", func(t *testing.T) {
		node, _, err := nomad.Nodes().Info(nodeID, nil)
		must.NoError(t, err)
		g := gpushareGroup(t, node)
		must.Eq(t, "nvidia", g.Vendor)
		must.Eq(t, "Tesla V100-SXM2-16GB", g.Name)
		must.SliceLen(t, 800, g.Instances)
		for _, inst := range g.Instances {
			must.True(t, inst.Healthy, must.Sprintf("instance %s", inst.ID))
		}
		decoded, err := nomadattr.DecodeGroup(g)
		must.NoError(t, err)
		must.SliceLen(t, 8, decoded.GPUs)
		must.Eq(t, "NV2,SYS,SYS,SYS,X,NV1,NV1,NV2", devicefn.EncodeRow(decoded.GPUs[4].Links))
		must.Eq(t, "00000000:8A:00.0", decoded.GPUs[7].PCIBusID)
		must.Eq(t, 1, decoded.GPUs[7].NUMANode)
		must.Eq(t, 100, decoded.SharesPerGPU)
		must.Eq(t, "mps", decoded.Sharing)
	})

	t.Run("25 shares of one GPU", func(t *testing.T) {
		ids := shareIDs(3, 40, 65)
		alloc := runPinned(t, nomad, "quarter", 25, ids)
		must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
		must.Eq(t, sorted(ids), sorted(allocatedIDs(alloc)))
		env := taskEnv(t, nomad, alloc)
		must.Eq(t, dgx1GPU+"3", env["CUDA_VISIBLE_DEVICES"])
		must.Eq(t, dgx1GPU+"3", env["NVIDIA_VISIBLE_DEVICES"])
		must.Eq(t, "0.25", env["GPUSHARE_FRACTION"])
		must.Eq(t, "25", env["GPUSHARE_SHARES"])
		must.Eq(t, "25", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
		must.Eq(t, "0=4096M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
		must.StrHasSuffix(t, "/mps-pipe", env["CUDA_MPS_PIPE_DIRECTORY"])
		must.StrHasSuffix(t, "/mps-log", env["CUDA_MPS_LOG_DIRECTORY"])
	})

	t.Run("200 shares are two whole NV2-connected GPUs", func(t *testing.T) {
		// GPU0 and GPU3 are joined by NV2 on the DGX-1 cube-mesh
		ids := append(shareIDs(0, 0, 100), shareIDs(3, 0, 100)...)
		alloc := runPinned(t, nomad, "two-gpus", 200, ids)
		must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
		env := taskEnv(t, nomad, alloc)
		must.Eq(t, dgx1GPU+"0,"+dgx1GPU+"3", env["CUDA_VISIBLE_DEVICES"])
		must.Eq(t, "2", env["GPUSHARE_FRACTION"])
		must.Eq(t, "100", env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
		must.Eq(t, "0=16384M,1=16384M", env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
	})

	t.Run("a fraction pinned to two GPUs fails in Reserve", func(t *testing.T) {
		ids := append(shareIDs(1, 0, 10), shareIDs(2, 0, 10)...)
		alloc := runPinned(t, nomad, "split", 20, ids)
		must.Eq(t, "failed", alloc.ClientStatus)
		ev := events(alloc)
		must.StrContains(t, ev, "a fraction of a GPU must be on one GPU")
		must.StrContains(t, ev, dgx1GPU+"1 has 10")
		must.StrContains(t, ev, dgx1GPU+"2 has 10")
	})

	t.Run("a GPU marked unhealthy in the fixture turns its shares unhealthy", func(t *testing.T) {
		src, err := os.ReadFile(fixture)
		must.NoError(t, err)
		block := fmt.Sprintf("gpu %q {\n", dgx1GPU+"7")
		sick := strings.Replace(string(src), block, block+"  healthy = false\n  health_reason = \"XID 79: GPU has fallen off the bus\"\n", 1)
		must.NotEq(t, string(src), sick)
		replaceFile(t, fixture, sick)
		waitInstances(t, nomad, nodeID, func(inst *api.NodeDevice) bool {
			if strings.HasPrefix(inst.ID, dgx1GPU+"7:") {
				return !inst.Healthy && inst.HealthDescription == "XID 79: GPU has fallen off the bus"
			}
			return inst.Healthy
		})
		replaceFile(t, fixture, string(src))
		waitInstances(t, nomad, nodeID, func(inst *api.NodeDevice) bool { return inst.Healthy })
	})
}

func onlyNode(t *testing.T, nomad *api.Client) string {
	nodes, _, err := nomad.Nodes().List(nil)
	must.NoError(t, err)
	must.SliceLen(t, 1, nodes)
	return nodes[0].ID
}

func gpushareGroup(t testing.TB, node *api.Node) *api.NodeDeviceResource {
	t.Helper()
	for _, d := range node.NodeResources.Devices {
		if d.Type == "gpushare" {
			return d
		}
	}
	t.Fatalf("node %s has no nvidia/gpushare device group", node.Name)
	return nil
}

// runPinned registers testdata/pinned.nomad.hcl pinned to ids and waits for
// its allocation to finish.
func runPinned(t *testing.T, nomad *api.Client, id string, count int, ids []string) *api.Allocation {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "pinned.nomad.hcl"))
	must.NoError(t, err)
	job, err := nomad.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       string(src),
		Variables:    fmt.Sprintf("shares = %d\nshare_ids = %q\n", count, strings.Join(ids, ",")),
		Canonicalize: true,
	})
	must.NoError(t, err)
	job.ID, job.Name = &id, &id
	_, _, err = nomad.Jobs().Register(job, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _, _, _ = nomad.Jobs().Deregister(id, true, nil) })

	ctx, cancel := context.WithTimeout(t.Context(), liveness)
	defer cancel()
	for {
		allocs, _, err := nomad.Jobs().Allocations(id, true, nil)
		must.NoError(t, err)
		for _, a := range allocs {
			if a.ClientStatus == "complete" || a.ClientStatus == "failed" {
				full, _, err := nomad.Allocations().Info(a.ID, nil)
				must.NoError(t, err)
				return full
			}
		}
		select {
		case <-ctx.Done():
			summary, _, _ := nomad.Jobs().Summary(id, nil)
			t.Fatalf("job %s did not finish within %s; allocations %d, summary %+v", id, liveness, len(allocs), summary)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func allocatedIDs(a *api.Allocation) []string {
	var ids []string
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			ids = append(ids, d.DeviceIDs...)
		}
	}
	return ids
}

func events(a *api.Allocation) string {
	var b strings.Builder
	for task, st := range a.TaskStates {
		for _, e := range st.Events {
			fmt.Fprintf(&b, "[%s] %s: %s %s\n", task, e.Type, e.DisplayMessage, e.Details["setup_error"])
		}
	}
	return b.String()
}

// taskEnv reads the KEY=value lines the task printed.
func taskEnv(t *testing.T, nomad *api.Client, a *api.Allocation) map[string]string {
	t.Helper()
	r, err := nomad.AllocFS().Cat(a, "alloc/logs/show-env.stdout.0", nil)
	must.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	must.NoError(t, err)
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func waitInstances(t *testing.T, nomad *api.Client, nodeID string, ok func(*api.NodeDevice) bool) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		node, _, err := nomad.Nodes().Info(nodeID, nil)
		must.NoError(t, err)
		bad := 0
		for _, inst := range gpushareGroup(t, node).Instances {
			if !ok(inst) {
				bad++
			}
		}
		if bad == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d instances still not as expected after 30s", bad)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	must.NoError(t, fixture.Rewrite(path, []byte(content)))
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
