package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/shoenig/test/must"
)

// interposerBlock is an enabled interposer block over a temporary
// library and state_dir.
func interposerBlock(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpushare-cuda.so")
	must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
	return "interposer {\n  enabled = true\n  library = \"" + lib + "\"\n  state_dir = \"" + filepath.Join(dir, "reservations") + "\"\n}\n"
}

// mergeReservations merges a task's reservations as Nomad's task runner
// does (client/allocrunner/taskrunner/device_hook.go, Prestart), one per
// device block in block order: each one's environment over the last's
// (a later block's value of a name wins), mounts and devices appended.
func mergeReservations(rs ...*device.ContainerReservation) *device.ContainerReservation {
	out := &device.ContainerReservation{Envs: map[string]string{}}
	for _, r := range rs {
		for k, v := range r.Envs {
			out.Envs[k] = v
		}
		out.Mounts = append(out.Mounts, r.Mounts...)
		out.Devices = append(out.Devices, r.Devices...)
	}
	return out
}

// A per-GPU group says one task may hold several of the node's GPUs
// (multi_gpu = "interposer") exactly when the interposer, which puts them
// back together, is on (with per-reservation MPS daemons too: whole GPUs
// run without MPS there, TestWholeGPUsWithoutMPSPerReservation); the
// merged model group says so only then.
func TestFingerprintMultiGPU(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         bool
	}{
		{"interposer", `device_groups = "gpu"` + "\n" + interposerBlock(t), true},
		{"timeslice", `device_groups = "gpu"` + "\nsharing = \"timeslice\"\n" + interposerBlock(t), true},
		{"no interposer", `device_groups = "gpu"`, false},
		{"mps daemons per reservation", `device_groups = "gpu"` + "\n" + interposerBlock(t) +
			"mps {\n  daemons = \"reservation\"\n  daemon_dir = \"" + t.TempDir() + "\"\n  control = \"/nonexistent/mps-control\"\n}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, fp := newPlugin(t, fixtures.DGX1V100, tc.config)
			must.NoError(t, fp.Error)
			must.SliceLen(t, 8, fp.Devices)
			var gs []devicefn.GPUGroup
			for _, d := range fp.Devices {
				a, ok := d.Attributes[devicefn.AttrMultiGPU]
				must.Eq(t, tc.want, ok, must.Sprint(d.Name))
				if ok {
					must.Eq(t, devicefn.MultiGPUInterposer, *a.String)
				}
				g, err := devicefn.DecodeGPUGroup(d.Name, fromSDKAttributes(d.Attributes))
				must.NoError(t, err)
				must.Eq(t, tc.want, g.MultiGPU)
				gs = append(gs, *g)
			}
			merged, err := devicefn.MergeGPUGroups(gs)
			must.NoError(t, err)
			must.SliceLen(t, 1, merged)
			must.Eq(t, tc.want, merged[0].MultiGPU)
		})
	}
	// per model: no such attribute, the interposer on or not
	_, _, fp := newPlugin(t, fixtures.DGX1V100, interposerBlock(t))
	must.SliceLen(t, 1, fp.Devices)
	must.MapNotContainsKey(t, fp.Devices[0].Attributes, devicefn.AttrMultiGPU)
}

// Two whole GPUs asked as two device blocks (GPU 5's first, then GPU 2's),
// merged as Nomad merges them: both GPUs' GPUSHARE_GPU_<index> survive
// (the interposer composes CUDA_VISIBLE_DEVICES from them, which Nomad
// left at the last block's GPU); every mount target the two reservations
// both use ends on the last reservation's state, the one the merged
// GPUSHARE_LIMITS and GPUSHARE_REGION name, so the task's processes read
// one consistent reservation; its limits say its GPU was whole
// (whole_gpus=1, compute_pct=100), so the interposer, composing two,
// lifts its one GPU's memory cap. (Device nodes are appended: each
// reservation's own GPU's, the control nodes twice, which runc accepts.)
func TestMergedWholeGPUReservations(t *testing.T) {
	p, _, fp := newPlugin(t, fixtures.DGX1V100, `device_groups = "gpu"`+"\n"+interposerBlock(t))
	must.NoError(t, fp.Error)
	p.exists = func(string) bool { return true }
	first, err := p.Reserve(devicefn.ShareIDs(v100+"5", 100))
	must.NoError(t, err)
	last, err := p.Reserve(devicefn.ShareIDs(v100+"2", 100))
	must.NoError(t, err)
	m := mergeReservations(first, last)

	for _, i := range []int{2, 5} {
		idx := strconv.Itoa(i)
		must.Eq(t, v100+idx, m.Envs["GPUSHARE_GPU_"+idx])
		must.Eq(t, "100", m.Envs["GPUSHARE_GPU_"+idx+"_SHARES"])
	}
	must.Eq(t, "100", m.Envs[EnvSharesPerGPU])
	must.Eq(t, v100+"2", m.Envs[EnvCUDAVisible]) // Nomad's overwrite: the interposer's to fix

	dir := m.Envs[EnvLimits]
	must.Eq(t, last.Envs[EnvLimits], dir)
	limits, err := os.ReadFile(filepath.Join(dir, "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), "\nmemory_bytes=17179869184\ncompute_pct=100\n")
	must.StrContains(t, string(limits), "\nwhole_gpus=1\n")

	// exec binds the mounts in order: the last one at a target is the one
	// the task sees
	seen := map[string]*device.Mount{}
	sources := map[string]map[string]bool{}
	for _, mt := range m.Mounts {
		seen[mt.TaskPath] = mt
		if sources[mt.TaskPath] == nil {
			sources[mt.TaskPath] = map[string]bool{}
		}
		sources[mt.TaskPath][mt.HostPath] = true
	}
	var differ []string
	for target, srcs := range sources {
		if len(srcs) > 1 {
			differ = append(differ, target)
		}
	}
	must.SliceContainsAll(t, []string{LimitsTaskDir, LimitsTaskDir + "/region", LimitsTaskDir + "/tgs", LimitsTaskDir + "/slice"}, differ)
	must.Eq(t, dir, seen[LimitsTaskDir].HostPath)
	must.Eq(t, filepath.Join(dir, "region"), seen[LimitsTaskDir+"/region"].HostPath)
	must.Eq(t, filepath.Join(dir, "tgs"), seen[LimitsTaskDir+"/tgs"].HostPath)
	must.Eq(t, filepath.Join(dir, "slice"), seen[LimitsTaskDir+"/slice"].HostPath)
	st, err := os.Stat(filepath.Join(dir, "region", m.Envs[EnvRegion]))
	must.NoError(t, err) // the merged key names a region directory of the seen reservation
	must.True(t, st.IsDir())
	must.Eq(t, m.Envs[EnvPreload], seen[m.Envs[EnvPreload]].HostPath)
	must.MapContainsKey(t, seen, PreloadTaskPath)

}

// A fraction among a task's reservations: its GPU's share count survives
// the merge, so the interposer can tell it is not whole and leave the
// environment alone; its limits file carries no whole_gpus, so a task
// that adds GPU variables of its own keeps its cap.
func TestMergedFractionIsTold(t *testing.T) {
	p, _, fp := newPlugin(t, fixtures.DGX1V100, `device_groups = "gpu"`+"\n"+interposerBlock(t))
	must.NoError(t, fp.Error)
	frac, err := p.Reserve(shares(0, 0, 30))
	must.NoError(t, err)
	whole, err := p.Reserve(devicefn.ShareIDs(v100+"1", 100))
	must.NoError(t, err)
	m := mergeReservations(frac, whole)
	must.Eq(t, "30", m.Envs["GPUSHARE_GPU_0_SHARES"])
	must.Eq(t, "100", m.Envs["GPUSHARE_GPU_1_SHARES"])
	must.Eq(t, "100", m.Envs[EnvShares]) // the last block's: no use for telling
	limits, err := os.ReadFile(filepath.Join(frac.Envs[EnvLimits], "limits"))
	must.NoError(t, err)
	must.StrNotContains(t, string(limits), "whole_gpus")
}

// With per-reservation MPS daemons on nodes whose GPUs one task may hold
// several of, a reservation of a whole GPU starts no daemon and sets no
// MPS variable (each block's own daemon would hide the task's other
// GPUs); a fraction there still gets its daemon, and a whole GPU on a node
// without the interposer too.
func TestWholeGPUsWithoutMPSPerReservation(t *testing.T) {
	dir, err := os.MkdirTemp("", "mps") // a short path: UNIX sockets live there
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	mps := "mps {\n  daemons = \"reservation\"\n  daemon_dir = \"" + dir + "\"\n  control = \"/nonexistent/mps-control\"\n}\n"
	p, _, fp := newPlugin(t, fixtures.DGX1V100, `device_groups = "gpu"`+"\n"+interposerBlock(t)+mps)
	must.NoError(t, fp.Error)
	gpu := fp.Devices[0].Devices[0].ID
	uuid, _, _ := strings.Cut(gpu, ":")
	whole := make([]string, 100)
	for i := range whole {
		whole[i] = fmt.Sprintf("%s:%d", uuid, i)
	}
	res, err := p.Reserve(whole)
	must.NoError(t, err, must.Sprint("a whole GPU started no MPS daemon (the control binary does not exist)"))
	for k := range res.Envs {
		must.False(t, strings.HasPrefix(k, "CUDA_MPS_"), must.Sprint(k))
	}
	_, err = p.Reserve(whole[:25])
	must.Error(t, err, must.Sprint("a fraction still starts its daemon, which fails here"))

	p, _, fp = newPlugin(t, fixtures.DGX1V100, `device_groups = "gpu"`+"\n"+mps)
	must.NoError(t, fp.Error)
	_, err = p.Reserve(whole)
	must.Error(t, err, must.Sprint("without the interposer a whole GPU keeps its daemon"))
}
