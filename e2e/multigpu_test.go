package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestMultiGPUOnPerGPUNodes: an allocation of two whole GPUs on nodes
// whose plugin offers each GPU as a device group of its own and runs the
// interposer (multi_gpu = "interposer"), through the real Nomad, plugin
// and scheduler (issue 45). The scheduler pins it by node alone, asking
// one device block per GPU; Nomad gives each block a GPU of its own; the
// interposer puts the task's two GPUs back together (the fake driver sees
// both UUIDs at cuInit, in index order), a scale 1 -> 2 keeps the first
// allocation running, and so does a drain of the other's node, as Nomad
// alone would. The request names the model (pinned as the regexp per-GPU
// groups match).
func TestMultiGPUOnPerGPUNodes(t *testing.T) {
	bin := buildInterposer(t)
	cfg := fmt.Sprintf("device_groups = %q\nsharing = %q\ninterposer {\n  enabled = true\n  library = %q\n  state_dir = %q\n}\n",
		devicefn.DeviceGroupsGPU, devicefn.SharingTimeslice, filepath.Join(bin, "libgpushare-cuda.so"), filepath.Join(bin, "reservations"))
	e := newPCIeEnvWith(t, "gpushare-multigpu-", 70, cfg, "dc1", "dc1")
	s := e.startScheduler("s1", "")
	_ = s

	j := e.parse("wide", map[string]any{"shares": 200, "model": "Tesla P100-PCIE-16GB"})
	task := j.TaskGroups[0].Tasks[0]
	task.Config["args"] = []string{"-c", bin + "/cuprog dlsym visible getenv:GPUSHARE_SHARES; exec sleep 3600"}
	task.Env = map[string]string{"LD_LIBRARY_PATH": bin, "GPUSHARE_REAL_LIBCUDA": bin + "/libcuda.so.1"}
	e.registerJob(j)
	t.Cleanup(func() { e.stopJobs("wide") })
	first := e.settled("wide", 1)

	// pinned by node, one block of 100 shares per GPU
	pinned, _, err := e.nomad.Jobs().Info("wide", nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(pinned, "g")
	must.True(t, ok)
	must.Eq(t, pin.ContractNode, rec.Contract)
	must.Eq(t, 2, rec.Blocks)
	devs := pinned.TaskGroups[0].Tasks[0].Resources.Devices
	must.Len(t, 2, devs)
	for _, d := range devs {
		must.Eq(t, uint64(100), *d.Count)
		must.Eq(t, "nvidia/gpushare", d.Name)
	}

	// two device groups, a whole GPU each; the task sees both
	a, _, err := e.nomad.Allocations().Info(first[0].ID, nil)
	must.NoError(t, err)
	var gpus []string
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			must.Len(t, 100, d.DeviceIDs, must.Sprintf("device group %s", d.Name))
			id, err := devicefn.ParseShareID(d.DeviceIDs[0])
			must.NoError(t, err)
			gpus = append(gpus, id.UUID)
		}
	}
	slices.Sort(gpus)
	must.Len(t, 2, slices.Compact(gpus))
	want := "visible 0 " + strings.Join(gpus, ",")
	logOf := func(name string) string {
		r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/"+name, nil)
		if err != nil {
			return ""
		}
		defer r.Close()
		out, _ := io.ReadAll(r)
		return string(out)
	}
	var out string
	e.eventually(liveness, "the task to print what the driver saw", func() bool {
		time.Sleep(500 * time.Millisecond)
		out = logOf("work.stdout.0")
		return strings.Contains(out, "getenv 0")
	})
	t.Logf("task stdout:\n%s\nstderr:\n%s", out, logOf("work.stderr.0"))
	must.StrContains(t, out, want)
	must.StrContains(t, out, "getenv 0 200")

	// a scale past the pin keeps what runs
	e.scale("wide", 2)
	after, ok, why := e.settledOr(s, "wide", 2, "")
	must.True(t, ok, must.Sprint(why))
	must.Eq(t, 0, e.restarts("wide", first, 1))
	must.SliceContainsFunc(t, after, first[0], func(a, b *api.Allocation) bool { return a.ID == b.ID })
	t.Logf("RESULT multi-GPU scale 1 -> 2: 0 restarts, on %s", strings.Join(nodesOf(after), ","))

	// the other node drained: its allocation moves (to the first's node,
	// whose two other GPUs are free), the first keeps running
	var other *api.Allocation
	for _, a := range after {
		if a.ID != first[0].ID {
			other = a
		}
	}
	must.NotNil(t, other)
	e.drainOne("wide", 2, other)
	moved := e.settled("wide", 2)
	must.SliceContainsFunc(t, moved, first[0], func(a, b *api.Allocation) bool { return a.ID == b.ID })
	must.Eq(t, 0, e.restarts("wide", after, 1))
	t.Logf("RESULT multi-GPU drain of one node of 2: 0 restarts beyond the moved one, now on %s", strings.Join(nodesOf(moved), ","))

	// the exec driver: a chroot whose mounts of the two reservations stack
	// at the same paths (the last one's show); the library comes from
	// /etc/ld.so.preload and composes the GPUs there too
	t.Run("exec", func(t *testing.T) {
		e := e.in(t)
		var node *api.Node
		e.eventually(liveness, "the exec driver's fingerprint", func() bool {
			stubs, _, err := e.nomad.Nodes().List(nil)
			must.NoError(t, err)
			for _, st := range stubs {
				if n, _, err := e.nomad.Nodes().Info(st.ID, nil); err == nil {
					if d := n.Drivers["exec"]; d != nil && d.Detected {
						node = n
					}
				}
			}
			return node != nil && node.Drivers["exec"].Healthy
		})
		srv := httptest.NewServer(http.FileServer(http.Dir(bin)))
		t.Cleanup(srv.Close)
		j := e.parse("wide-exec", map[string]any{"shares": 200})
		j.Type = ptr("batch")
		j.Update, j.TaskGroups[0].Update, j.TaskGroups[0].Migrate = nil, nil, nil // not for batch jobs
		task := j.TaskGroups[0].Tasks[0]
		task.Driver = "exec"
		task.Artifacts = []*api.TaskArtifact{
			{GetterSource: ptr(srv.URL + "/cuprog"), GetterMode: ptr("file"), RelativeDest: ptr("local/cuprog")},
			{GetterSource: ptr(srv.URL + "/libcuda.so.1"), GetterMode: ptr("file"), RelativeDest: ptr("local/libcuda.so.1")},
		}
		task.Config["args"] = []string{"-c", "chmod +x /local/cuprog && exec /local/cuprog dlsym visible getenv:GPUSHARE_SHARES"}
		task.Env = map[string]string{"LD_LIBRARY_PATH": "/local", "GPUSHARE_REAL_LIBCUDA": "/local/libcuda.so.1"}
		task.Resources.MemoryMB = ptr(64)
		e.registerJob(j)
		t.Cleanup(func() { e.stopJobs("wide-exec") })
		alloc := waitFinished(t, e.nomad, "wide-exec")
		must.Eq(t, "complete", alloc.ClientStatus, must.Sprintf("task events: %s", events(alloc)))
		var gpus []string
		for _, tr := range alloc.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				id, err := devicefn.ParseShareID(d.DeviceIDs[0])
				must.NoError(t, err)
				gpus = append(gpus, id.UUID)
			}
		}
		slices.Sort(gpus)
		must.Len(t, 2, gpus)
		r, err := e.nomad.AllocFS().Cat(alloc, "alloc/logs/work.stdout.0", nil)
		must.NoError(t, err)
		out, err := io.ReadAll(r)
		r.Close()
		must.NoError(t, err)
		t.Logf("exec task stdout:\n%s", out)
		must.StrContains(t, string(out), "visible 0 "+strings.Join(gpus, ","))
		must.StrContains(t, string(out), "getenv 0 200")
	})
}
