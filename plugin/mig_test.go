package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

const (
	migA100  = "GPU-a2000000-0000-4000-8000-00000000000"
	migInst3 = "MIG-a2000000-0000-4000-8000-000000000001"
	migInst1 = "MIG-a2000000-0000-4000-8000-000000000003"
	migInst7 = "MIG-a2000000-0000-4000-8000-000000000011"
)

// mixedNode is one MIG-enabled A100 with a 3g.20gb and a 1g.5gb instance
// beside one A100 shared as a whole.
const mixedNode = `
driver_version = "550.54.15"
cuda_version   = "12.4"
links = ["X NV12", "NV12 X"]
gpu "GPU-mig" {
  model = "NVIDIA A100-SXM4-40GB"
  memory_mib = 40960
  pci_bus_id = "00000000:10:00.0"
  compute_capability = "8.0"
  mig_device "MIG-mig-3g" {
    profile = "3g.20gb"
    memory_mib = 19968
    slices = 3
  }
  mig_device "MIG-mig-1g" {
    profile = "1g.5gb"
    memory_mib = 4864
    slices = 1
  }
}
gpu "GPU-whole" {
  model = "NVIDIA A100-SXM4-40GB"
  memory_mib = 40960
  pci_bus_id = "00000000:20:00.0"
  compute_capability = "8.0"
}
`

func groupsByType(fp *device.FingerprintResponse) map[string]*device.DeviceGroup {
	out := map[string]*device.DeviceGroup{}
	for _, g := range fp.Devices {
		out[g.Type+"/"+g.Name] = g
	}
	return out
}

func TestFingerprintMIGInstances(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.A100MIG, "")
	must.NoError(t, fp.Error)
	by := groupsByType(fp)
	// no shares of MIG-enabled GPUs: only their instances, one group per profile
	must.MapLen(t, 4, by)
	must.MapContainsKeys(t, by, []string{"gpushare-mig/1g.5gb", "gpushare-mig/2g.10gb", "gpushare-mig/3g.20gb", "gpushare-mig/7g.40gb"})

	g := by["gpushare-mig/1g.5gb"]
	must.NoError(t, g.Validate())
	must.Eq(t, "nvidia", g.Vendor)
	must.SliceLen(t, 2, g.Devices)
	must.Eq(t, migInst1, g.Devices[0].ID)
	must.True(t, g.Devices[0].Healthy)
	must.Eq(t, "00000000:10:00.0", g.Devices[0].HwLocality.PciBusID)
	must.Eq(t, "1g.5gb", *g.Attributes["profile"].String)
	must.Eq(t, "mig", *g.Attributes["sharing"].String)
	must.Eq(t, int64(4864), *g.Attributes["memory"].Int)
	must.Eq(t, int64(1), *g.Attributes["slices"].Int)
	must.Eq(t, int64(7), *g.Attributes["parent_slices"].Int)
	must.Eq(t, migA100+"0", *g.Attributes["mig1.parent_uuid"].String)
	must.Eq(t, "X,NV12", *g.Attributes["mig1.parent_links"].String)

	seven := by["gpushare-mig/7g.40gb"]
	must.Eq(t, migInst7, seven.Devices[0].ID)
	must.Eq(t, "00000000:20:00.0", seven.Devices[0].HwLocality.PciBusID)
}

func TestFingerprintMIGBesideSharedGPU(t *testing.T) {
	p := newPluginFile(t, mixedNode)
	fp := p.fingerprintOnce(t.Context())
	must.NoError(t, fp.Error)
	by := groupsByType(fp)
	must.MapLen(t, 3, by)
	shared := by["gpushare/NVIDIA A100-SXM4-40GB"]
	must.NotNil(t, shared)
	must.SliceLen(t, 100, shared.Devices) // only the whole GPU is shared
	must.Eq(t, "GPU-whole:0", shared.Devices[0].ID)
	must.Eq(t, "MIG-mig-3g", by["gpushare-mig/3g.20gb"].Devices[0].ID)
	must.Eq(t, "MIG-mig-1g", by["gpushare-mig/1g.5gb"].Devices[0].ID)

	// both kinds reserve on one node
	res, err := p.Reserve([]string{"MIG-mig-3g"})
	must.NoError(t, err)
	must.Eq(t, "MIG-mig-3g", res.Envs[EnvNvidiaVisible])
	res, err = p.Reserve(devicefn.ShareIDs("GPU-whole", 50))
	must.NoError(t, err)
	must.Eq(t, "GPU-whole", res.Envs[EnvNvidiaVisible])
}

// sickParent serves fixtures.A100MIG with extra config, marks its first
// GPU unhealthy (XID 79) and returns the plugin and the groups it then
// offers.
func sickParent(t *testing.T, extra string) (*Plugin, map[string]*device.DeviceGroup) {
	t.Helper()
	p, path, _ := newPlugin(t, fixtures.A100MIG, extra)
	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	next(t, ch)

	src, err := os.ReadFile(path)
	must.NoError(t, err)
	head := `gpu "` + migA100 + `0" {` + "\n"
	sick := strings.Replace(string(src), head, head+"  healthy = false\n  health_reason = \"XID 79: GPU has fallen off the bus\"\n", 1)
	must.NotEq(t, string(src), sick)
	writeLater(t, path, sick)
	return p, groupsByType(next(t, ch))
}

func TestMIGParentUnhealthy(t *testing.T) {
	p, by := sickParent(t, "")
	for _, name := range []string{"gpushare-mig/3g.20gb", "gpushare-mig/1g.5gb", "gpushare-mig/2g.10gb"} {
		for _, d := range by[name].Devices {
			must.False(t, d.Healthy, must.Sprint(d.ID))
			must.Eq(t, "parent GPU "+migA100+"0: XID 79: GPU has fallen off the bus", d.HealthDesc)
		}
	}
	must.True(t, by["gpushare-mig/7g.40gb"].Devices[0].Healthy) // the other GPU's instance

	_, err := p.Reserve([]string{migInst3})
	must.ErrorIs(t, err, ErrUnhealthyShare)
	must.ErrorContains(t, err, "XID 79")
	_, err = p.Reserve([]string{migInst7})
	must.NoError(t, err)
}

func TestReserveMIG(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.A100MIG, "")
	p.exists = func(path string) bool { return path == "/dev/nvidiactl" }
	res, err := p.Reserve([]string{migInst3})
	must.NoError(t, err)
	must.Eq(t, map[string]string{
		EnvNvidiaVisible: migInst3,
		EnvCUDAVisible:   migInst3,
		EnvShares:        "1",
		EnvShareIDs:      migInst3, // whole: the instance's own ID
		EnvFraction:      "0.4286",
		EnvShareMemory:   "19968",
		EnvSharing:       "mig",
		EnvMIGProfile:    "3g.20gb",
		EnvMIGParent:     migA100 + "0",
	}, res.Envs)
	must.SliceEmpty(t, res.Mounts) // no MPS: the hardware isolates the instance
	must.SliceLen(t, 1, res.Devices)

	res, err = p.Reserve([]string{migInst7})
	must.NoError(t, err)
	must.Eq(t, "1", res.Envs[EnvFraction])
}

func TestReserveMIGRefusals(t *testing.T) {
	p := newPluginFile(t, mixedNode)
	must.NoError(t, p.fingerprintOnce(t.Context()).Error)
	mustRefuse(t, p, []refusal{
		{"two instances", []string{"MIG-mig-3g", "MIG-mig-1g"}, ErrMIGOneInstance,
			[]string{"2 instances requested (MIG-mig-1g, MIG-mig-3g)", "count = 1 of a larger profile"}},
		{"instance and shares", []string{"MIG-mig-3g", "GPU-whole:0"}, ErrMIGMixed,
			[]string{"MIG instances MIG-mig-3g and shares GPU-whole:0"}},
		{"unknown instance", []string{"MIG-mig-3g", "MIG-nope"}, ErrUnknownShare,
			[]string{"MIG-nope", "offers the MIG instances MIG-mig-1g, MIG-mig-3g"}},
		{"duplicate", []string{"MIG-mig-3g", "MIG-mig-3g"}, ErrDuplicateShare, []string{"MIG-mig-3g"}},
		{"shares of a MIG GPU", []string{"GPU-mig:0"}, ErrUnknownShare, []string{"GPU-mig:0"}},
	})
}

// capsSource is a node as NVML reports it: device minors and the
// /dev/nvidia-caps minors of each MIG instance.
type capsSource struct{ inv devicefn.Inventory }

func (s capsSource) Name() string { return "caps" }
func (s capsSource) Inventory(context.Context) (*devicefn.Inventory, error) {
	inv := s.inv
	return &inv, nil
}
func (s capsSource) Health(context.Context) ([]devicefn.Health, error) { return nil, nil }
func (s capsSource) Stats(context.Context) ([]devicefn.Stats, error)   { return nil, nil }
func (s capsSource) Close() error                                      { return nil }

func TestReserveMIGDeviceNodes(t *testing.T) {
	present := map[string]bool{"/dev/nvidiactl": true, "/dev/nvidia2": true, "/dev/nvidia-caps/nvidia-cap21": true, "/dev/nvidia-caps/nvidia-cap22": true}
	must.Eq(t, []string{"/dev/nvidiactl", "/dev/nvidia2", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"},
		capsNodes(t, `sharing = "timeslice"`, "MIG-0", func(path string) bool { return present[path] }))
}

// capsNodes reserves id on a node of one A100 (device minor 2) with one
// 1g.5gb instance MIG-0 (caps minors 21 and 22), the device nodes in
// exists present, and returns the host paths of the task's devices.
func capsNodes(t *testing.T, config, id string, exists func(string) bool) []string {
	t.Helper()
	src := capsSource{devicefn.Inventory{
		GPUs: []devicefn.GPU{{UUID: "GPU-0", Model: "A100", MemoryMiB: 40960, Minor: 2, MIG: true,
			MIGDevices: []devicefn.MIGDevice{{UUID: "MIG-0", Profile: "1g.5gb", MemoryMiB: 4864, Slices: 1, ParentSlices: 7, CapMinors: []int{21, 22}}}}},
		Links: devicefn.Matrix{{{Kind: devicefn.LinkSelf}}},
	}}
	p := New(hclog.NewNullLogger(), func(*Config, hclog.Logger) (devicefn.Source, error) { return src, nil })
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, config)}))
	p.exists = exists
	must.NoError(t, p.fingerprintOnce(t.Context()).Error)
	res, err := p.Reserve([]string{id})
	must.NoError(t, err)
	var got []string
	for _, d := range res.Devices {
		got = append(got, d.HostPath)
	}
	return got
}

// refusal is a request Reserve must refuse with err, saying each of want.
type refusal struct {
	name string
	ids  []string
	err  error
	want []string
}

func mustRefuse(t *testing.T, p *Plugin, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Reserve(c.ids)
			must.True(t, errors.Is(err, c.err), must.Sprintf("got %v", err))
			for _, w := range c.want {
				must.ErrorContains(t, err, w)
			}
		})
	}
}

// newPluginFile is a plugin serving a fixture given as text.
func newPluginFile(t *testing.T, content string) *Plugin {
	return pluginOnFile(t, content, `sharing = "timeslice"`)
}

// pluginOnFile is a plugin serving a fixture given as text, with more
// config.
func pluginOnFile(t *testing.T, content, extra string) *Plugin {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpus.hcl")
	must.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	p := New(hclog.NewNullLogger(), nil)
	p.exists = func(string) bool { return false }
	cfg := fmt.Sprintf("fixture = %q\n%s", path, extra)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}))
	return p
}
