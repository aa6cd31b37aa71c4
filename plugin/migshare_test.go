package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/shoenig/test/must"
)

const a100MIG = "NVIDIA A100-SXM4-40GB MIG "

// sharedPlugin serves a fixture given as text with mig_instances =
// "shared" and extra config, fingerprinted once.
func sharedPlugin(t *testing.T, content, extra string) *Plugin {
	t.Helper()
	if !strings.Contains(extra, "sharing") {
		extra += "\nsharing = \"timeslice\""
	}
	p := pluginOnFile(t, content, "mig_instances = \"shared\"\n"+extra)
	must.NoError(t, p.fingerprintOnce(t.Context()).Error)
	return p
}

// migShareIDs are shares from..to-1 of a MIG instance.
func migShareIDs(uuid string, from, to int) []string {
	return devicefn.ShareIDs(uuid, to)[from:]
}

func TestFingerprintSharedMIG(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.A100MIG, `mig_instances = "shared"`)
	must.NoError(t, fp.Error)
	by := groupsByType(fp)
	// one nvidia/gpushare group per parent model and profile, no gpushare-mig
	must.MapLen(t, 4, by)
	must.MapContainsKeys(t, by, []string{"gpushare/" + a100MIG + "1g.5gb", "gpushare/" + a100MIG + "2g.10gb",
		"gpushare/" + a100MIG + "3g.20gb", "gpushare/" + a100MIG + "7g.40gb"})

	// a share stays 1/100 of the parent: 1g of 7 offers 14, 3g 42, 7g 100
	for profile, n := range map[string]int{"1g.5gb": 2 * 14, "2g.10gb": 28, "3g.20gb": 42, "7g.40gb": 100} {
		g := by["gpushare/"+a100MIG+profile]
		must.NoError(t, g.Validate())
		must.SliceLen(t, n, g.Devices, must.Sprint(profile))
		must.Eq(t, profile, *g.Attributes["mig_profile"].String)
		for _, d := range g.Devices {
			must.True(t, d.Healthy)
		}
	}
	one := by["gpushare/"+a100MIG+"1g.5gb"]
	must.Eq(t, migInst1+":0", one.Devices[0].ID)
	must.Eq(t, migInst1+":13", one.Devices[13].ID)
	must.Eq(t, "MIG-a2000000-0000-4000-8000-000000000004:0", one.Devices[14].ID)
	must.Eq(t, int64(14), *one.Attributes["mig_shares"].Int)
	must.Eq(t, "00000000:10:00.0", one.Devices[0].HwLocality.PciBusID)
	must.Eq(t, migInst7+":99", by["gpushare/"+a100MIG+"7g.40gb"].Devices[99].ID)

	// the groups decode as the placement core reads them
	g, err := devicefn.DecodeGroup(a100MIG+"3g.20gb", fromSDKAttributes(by["gpushare/"+a100MIG+"3g.20gb"].Attributes))
	must.NoError(t, err)
	must.Eq(t, 42, g.GPUShares())
	must.Eq(t, migA100+"0", g.GPUs[0].Parent)
	// the parent's profiles, the fixture's defaults for an A100-40GB
	must.Eq(t, "1g.5gb:1:4864,2g.10gb:2:9856,3g.20gb:3:19968,4g.20gb:4:19968,7g.40gb:7:40192",
		*by["gpushare/"+a100MIG+"3g.20gb"].Attributes["gpu0.mig_profiles"].String)
}

func TestSharedMIGParentUnhealthy(t *testing.T) {
	p, by := sickParent(t, `mig_instances = "shared"`)
	for _, profile := range []string{"3g.20gb", "2g.10gb", "1g.5gb"} {
		for _, d := range by["gpushare/"+a100MIG+profile].Devices {
			must.False(t, d.Healthy, must.Sprint(d.ID))
			must.StrContains(t, d.HealthDesc, "parent GPU "+migA100+"0: XID 79: GPU has fallen off the bus")
		}
	}
	for _, d := range by["gpushare/"+a100MIG+"7g.40gb"].Devices { // the other GPU's instance
		must.True(t, d.Healthy)
	}
	_, err := p.Reserve(migShareIDs(migInst3, 0, 14))
	must.ErrorIs(t, err, ErrUnhealthyShare)
	must.ErrorContains(t, err, "shares 0-13 of MIG instance "+migInst3+" of GPU "+migA100+"0 (XID 79")
	_, err = p.Reserve(migShareIDs(migInst7, 0, 14))
	must.NoError(t, err)
}

func TestReserveSharedMIG(t *testing.T) {
	p := sharedPlugin(t, mixedNode, "")
	p.exists = func(path string) bool { return path == "/dev/nvidiactl" }
	res, err := p.Reserve(migShareIDs("MIG-mig-3g", 0, 14))
	must.NoError(t, err)
	must.Eq(t, map[string]string{
		EnvNvidiaVisible: "MIG-mig-3g",
		EnvCUDAVisible:   "MIG-mig-3g",
		EnvShares:        "14",
		EnvShareIDs:      "MIG-mig-3g:0-13",
		EnvSharesPerGPU:  "100",
		EnvFraction:      "0.14",      // of the parent GPU
		EnvShareMemory:   "6650",      // 14 x 19968/42
		EnvSharing:       "timeslice", // within the instance
		EnvMIGProfile:    "3g.20gb",
		EnvMIGParent:     "GPU-mig",
	}, res.Envs)
	must.SliceLen(t, 1, res.Devices)

	// the whole instance, and a GPU's shares beside it on the node
	res, err = p.Reserve(migShareIDs("MIG-mig-1g", 0, 14))
	must.NoError(t, err)
	must.Eq(t, "0.14", res.Envs[EnvFraction])
	must.Eq(t, "4858", res.Envs[EnvShareMemory]) // 14 x (4864/14 rounded down)
	res, err = p.Reserve(devicefn.ShareIDs("GPU-whole", 50))
	must.NoError(t, err)
	must.Eq(t, "GPU-whole", res.Envs[EnvNvidiaVisible])
	must.StrNotContains(t, fmt.Sprint(res.Envs), "MIG")
}

func TestReserveSharedMIGRefusals(t *testing.T) {
	p := sharedPlugin(t, mixedNode, "")
	mustRefuse(t, p, []refusal{
		{"two instances", append(migShareIDs("MIG-mig-3g", 0, 2), "MIG-mig-1g:0"), ErrMIGSpread,
			[]string{"3 shares span 2 MIG instances (MIG-mig-1g has 1, MIG-mig-3g has 2)", "instances cannot be joined"}},
		{"instance and GPU", []string{"MIG-mig-3g:0", "GPU-whole:0"}, ErrMIGSpread,
			[]string{"shares of the MIG instance MIG-mig-3g and of GPUs (GPU-whole:0)"}},
		{"beyond the instance", migShareIDs("MIG-mig-1g", 0, 15), ErrUnknownShare,
			[]string{"MIG-mig-1g:14: ", "MIG-mig-1g (1g.5gb, shares 0..13)", "MIG-mig-3g (3g.20gb, shares 0..41)"}},
		{"unknown instance", []string{"MIG-mig-3g:0", "MIG-nope:0"}, ErrUnknownShare, []string{"MIG-nope:0: "}},
		{"duplicate", []string{"MIG-mig-3g:1", "MIG-mig-3g:1"}, ErrDuplicateShare, []string{"MIG-mig-3g:1"}},
		{"the whole instance's ID", []string{"MIG-mig-3g"}, ErrUnknownShare, []string{"MIG-mig-3g"}},
		{"shares of the MIG GPU", []string{"GPU-mig:0"}, ErrUnknownShare, []string{"GPU-mig:0"}},
	})

	// sharing = "exclusive": whole instances only
	ex := sharedPlugin(t, mixedNode, `sharing = "exclusive"`)
	_, err := ex.Reserve(migShareIDs("MIG-mig-3g", 0, 14))
	must.ErrorIs(t, err, ErrExclusive)
	must.ErrorContains(t, err, "14 shares of MIG instance MIG-mig-3g (3g.20gb), which offers 42; ask for all 42")
	_, err = ex.Reserve(migShareIDs("MIG-mig-3g", 0, 42))
	must.NoError(t, err)
}

// MPS holds a task to its part of the instance, not of the GPU: 14 of the
// 3g's 42 shares are a third of its SMs and 14 shares' memory.
func TestReserveSharedMIGMPS(t *testing.T) {
	p := sharedPlugin(t, mixedNode, "sharing = \"mps\"\nmps {\n daemons = \"node\"\n}")
	for _, c := range []struct {
		ids             []string
		threads, pinned string
	}{
		{migShareIDs("MIG-mig-3g", 0, 14), "34", "0=6650M"},
		{migShareIDs("MIG-mig-3g", 0, 42), "100", "0=19950M"},
		{migShareIDs("MIG-mig-1g", 0, 7), "50", "0=2429M"},
		{devicefn.ShareIDs("GPU-whole", 7), "7", "0=2867M"}, // a GPU's: 7%, not the float's 8
	} {
		res, err := p.Reserve(c.ids)
		must.NoError(t, err)
		must.Eq(t, c.threads, res.Envs[EnvMPSThreads], must.Sprint(c.ids[0]))
		must.Eq(t, c.pinned, res.Envs[EnvMPSPinnedMemory], must.Sprint(c.ids[0]))
	}
}

// A per-reservation daemon serves the MIG device alone, with the task's
// part of it as its defaults.
func TestReserveSharedMIGDaemon(t *testing.T) {
	wd, err := os.Getwd()
	must.NoError(t, err)
	f := &fakeMPS{control: filepath.Join(wd, "testdata", "fake-mps-control"), record: filepath.Join(t.TempDir(), "record")}
	t.Setenv("FAKE_MPS_RECORD", f.record)
	daemonDir := filepath.Join(shortTempDir(t), "d")
	p := sharedPlugin(t, mixedNode, fmt.Sprintf("sharing = \"mps\"\nmps {\n control = %q\n daemon_dir = %q\n}", f.control, daemonDir))
	p.mpsHolders = func(string, map[string]bool) map[string]bool { return nil }
	res, err := p.Reserve(migShareIDs("MIG-mig-3g", 0, 14))
	must.NoError(t, err)
	dir := filepath.Join(daemonDir, mpsKey("MIG-mig-3g_0-13"))
	must.Eq(t, filepath.Join(dir, "pipe"), res.Envs[EnvMPSPipe])
	env := envFile(t, filepath.Join(dir, "log"))
	must.Eq(t, "MIG-mig-3g", env[EnvCUDAVisible])
	must.Eq(t, "34", env[EnvMPSThreads])
	must.Eq(t, "0=6650M", env[EnvMPSPinnedMemory])
}

// The interposer's limits are the task's part of the instance.
func TestReserveSharedMIGInterposer(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libgpushare-cuda.so")
	must.NoError(t, os.WriteFile(lib, []byte("not really"), 0o644))
	state := filepath.Join(dir, "reservations")
	p := sharedPlugin(t, mixedNode, fmt.Sprintf("interposer {\n enabled = true\n library = %q\n state_dir = %q\n}", lib, state))
	res, err := p.Reserve(migShareIDs("MIG-mig-3g", 0, 14))
	must.NoError(t, err)
	rdir := reservationDir(t, state, "MIG-mig-3g_0-13")
	must.Eq(t, rdir, res.Envs[EnvLimits])
	limits, err := os.ReadFile(filepath.Join(rdir, "limits"))
	must.NoError(t, err)
	must.StrContains(t, string(limits), fmt.Sprintf("\nmemory_bytes=%d\ncompute_pct=34\n", uint64(6650)<<20))
	// the TGS channel is the instance's: instances are isolated from each other
	key, err := os.ReadFile(filepath.Join(state, keyFile))
	must.NoError(t, err)
	_, err = os.Stat(filepath.Join(state, "tgs", tgsChannelName(key, "MIG-mig-3g")))
	must.NoError(t, err)
}

// The device nodes of shares of an instance are its parent's and its own
// /dev/nvidia-caps nodes.
func TestReserveSharedMIGDeviceNodes(t *testing.T) {
	must.Eq(t, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"},
		capsNodes(t, "sharing = \"timeslice\"\nmig_instances = \"shared\"", "MIG-0:3", func(path string) bool { return path != "/dev/nvidia-uvm-tools" }))
}
