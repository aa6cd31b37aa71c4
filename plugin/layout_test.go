package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// layoutSource is a node of two MIG-enabled A100s and a V100 whose MIG
// layouts ApplyMIGLayout changes, unless the GPU is busy.
type layoutSource struct {
	mu      sync.Mutex
	inv     devicefn.Inventory
	busy    map[string]bool
	applied []string
}

var _ devicefn.MIGLayouter = (*layoutSource)(nil)

func newLayoutSource() *layoutSource {
	seven := []devicefn.MIGDevice{{UUID: "MIG-0-7g", Profile: "7g.40gb", MemoryMiB: 40192, Slices: 7, ParentSlices: 7}}
	self, sys := devicefn.Link{Kind: devicefn.LinkSelf}, devicefn.Link{Kind: devicefn.LinkSYS}
	return &layoutSource{busy: map[string]bool{}, inv: devicefn.Inventory{
		GPUs: []devicefn.GPU{
			{Index: 0, UUID: "GPU-a0", Model: "A100", MemoryMiB: 40960, Minor: -1, MIG: true, MIGDevices: seven},
			{Index: 1, UUID: "GPU-a1", Model: "A100", MemoryMiB: 40960, Minor: -1, MIG: true,
				MIGDevices: []devicefn.MIGDevice{{UUID: "MIG-1-7g", Profile: "7g.40gb", MemoryMiB: 40192, Slices: 7, ParentSlices: 7}}},
			{Index: 2, UUID: "GPU-v", Model: "V100", MemoryMiB: 16384, Minor: -1},
		},
		Links: devicefn.Matrix{{self, sys, sys}, {sys, self, sys}, {sys, sys, self}},
	}}
}

func (s *layoutSource) Name() string { return "layout" }
func (s *layoutSource) Inventory(context.Context) (*devicefn.Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.inv
	inv.GPUs = append([]devicefn.GPU(nil), s.inv.GPUs...)
	return &inv, nil
}
func (s *layoutSource) Health(context.Context) ([]devicefn.Health, error) { return nil, nil }
func (s *layoutSource) Stats(context.Context) ([]devicefn.Stats, error)   { return nil, nil }
func (s *layoutSource) Close() error                                      { return nil }

func (s *layoutSource) ApplyMIGLayout(_ context.Context, uuid string, profiles []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[uuid] {
		return fmt.Errorf("gpu %s: %w (1)", uuid, devicefn.ErrGPUBusy)
	}
	s.applied = append(s.applied, uuid)
	for i, g := range s.inv.GPUs {
		if g.UUID != uuid {
			continue
		}
		var devs []devicefn.MIGDevice
		for k, p := range profiles {
			slices := int(p[0] - '0')
			devs = append(devs, devicefn.MIGDevice{UUID: fmt.Sprintf("MIG-%s-%d", uuid, k), Profile: p, MemoryMiB: 4864, Slices: slices, ParentSlices: 7})
		}
		s.inv.GPUs[i].MIGDevices = devs
	}
	return nil
}

func TestMIGLayouts(t *testing.T) {
	src := newLayoutSource()
	src.busy["GPU-a1"] = true
	var logs strings.Builder
	p := New(hclog.New(&hclog.LoggerOptions{Output: &logs}), func(*Config, hclog.Logger) (devicefn.Source, error) { return src, nil })
	cfg := withMIG(t, `sharing = "timeslice"`, map[string][]string{"A100": {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, "V100": {"1g.5gb"}})
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: cfg}))
	must.Eq(t, map[string][]string{"A100": {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}, "V100": {"1g.5gb"}}, p.cfg.MIG)

	fp := p.fingerprintOnce(t.Context())
	must.NoError(t, fp.Error)
	// the idle A100 got the layout and its new instances are offered at
	// once; the busy one keeps its 7g.40gb
	must.Eq(t, []string{"GPU-a0"}, src.applied)
	by := groupsByType(fp)
	must.SliceLen(t, 2, by["gpushare-mig/1g.5gb"].Devices)
	must.Eq(t, "MIG-GPU-a0-0", by["gpushare-mig/3g.20gb"].Devices[0].ID)
	must.Eq(t, "MIG-1-7g", by["gpushare-mig/7g.40gb"].Devices[0].ID)
	must.StrContains(t, logs.String(), "MIG layout applied: gpu=GPU-a0")
	must.StrContains(t, logs.String(), "gpu busy: MIG layout left as it is until the gpu is idle: gpu=GPU-a1")
	must.StrContains(t, logs.String(), "MIG mode is off: no layout applied")

	// once in place nothing is applied again, and nothing logged twice
	n := strings.Count(logs.String(), "gpu busy")
	p.fingerprintOnce(t.Context())
	must.Eq(t, []string{"GPU-a0"}, src.applied)
	must.Eq(t, n, strings.Count(logs.String(), "gpu busy"))

	// the busy GPU gets it when it is idle
	src.busy["GPU-a1"] = false
	fp = p.fingerprintOnce(t.Context())
	must.Eq(t, []string{"GPU-a0", "GPU-a1"}, src.applied)
	must.SliceLen(t, 4, groupsByType(fp)["gpushare-mig/1g.5gb"].Devices)
}

// Layouts work the same with mig_instances = "shared": the instances a
// layout made are offered as shares at once, a busy GPU keeps its own.
func TestMIGLayoutsShared(t *testing.T) {
	src := newLayoutSource()
	src.busy["GPU-a1"] = true
	p := New(hclog.NewNullLogger(), func(*Config, hclog.Logger) (devicefn.Source, error) { return src, nil })
	cfg := withMIG(t, "sharing = \"timeslice\"\nmig_instances = \"shared\"", map[string][]string{"A100": {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}})
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: cfg}))

	by := groupsByType(p.fingerprintOnce(t.Context()))
	must.Eq(t, []string{"GPU-a0"}, src.applied)
	must.MapLen(t, 5, by) // V100, and A100 MIG 1g, 2g, 3g (new) and 7g (busy)
	must.SliceLen(t, 42, by["gpushare/A100 MIG 3g.20gb"].Devices)
	must.Eq(t, "MIG-GPU-a0-0:0", by["gpushare/A100 MIG 3g.20gb"].Devices[0].ID)
	must.SliceLen(t, 2*14, by["gpushare/A100 MIG 1g.5gb"].Devices)
	must.Eq(t, "MIG-1-7g:99", by["gpushare/A100 MIG 7g.40gb"].Devices[99].ID)
	_, err := p.Reserve([]string{"MIG-GPU-a0-1:27"})
	must.NoError(t, err)

	src.busy["GPU-a1"] = false
	by = groupsByType(p.fingerprintOnce(t.Context()))
	must.Eq(t, []string{"GPU-a0", "GPU-a1"}, src.applied)
	must.SliceLen(t, 4*14, by["gpushare/A100 MIG 1g.5gb"].Devices)
	must.MapNotContainsKey(t, by, "gpushare/A100 MIG 7g.40gb")
	_, err = p.Reserve([]string{"MIG-1-7g:0"})
	must.ErrorIs(t, err, ErrUnknownShare) // the instance is gone
}

func TestMIGLayoutConfigErrors(t *testing.T) {
	p := New(hclog.NewNullLogger(), nil)
	err := p.SetConfig(&base.Config{PluginConfig: withMIG(t, "", map[string][]string{"A100": {}, "H100": {"3g 40gb"}})})
	must.ErrorIs(t, err, ErrConfig)
	must.ErrorContains(t, err, `mig "A100" = []: give the profiles`)
	must.ErrorContains(t, err, `mig "H100": profile "3g 40gb" is not a MIG profile name`)
}

// withMIG is the config body with a mig block of layouts. The block's
// keys are GPU models, quoted: Nomad's agent reads them from its HCL1
// configuration (TestMIG in e2e runs that path), but HCL2's native syntax,
// which encodeConfig parses, has no quoted argument names, so the block is
// set on the decoded config.
func withMIG(t *testing.T, body string, layouts map[string][]string) []byte {
	t.Helper()
	var cfg Config
	must.NoError(t, hclspec.Decode(configSpec, encodeConfig(t, body), &cfg))
	cfg.MIG = layouts
	b, err := hclspec.Encode(configSpec, cfg)
	must.NoError(t, err)
	return b
}
