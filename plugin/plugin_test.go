package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/fixture"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/gpushare/gpushare/internal/version"
	"github.com/hashicorp/go-hclog"
	goversion "github.com/hashicorp/go-version"
	"github.com/shoenig/test/must"
)

// encodeConfig turns the body of a plugin "gpushare" { config { ... } }
// block into what Nomad hands SetConfig, defaults applied by the schema.
func encodeConfig(t testing.TB, body string) []byte {
	t.Helper()
	b, err := hclspec.EncodeHCL(configSpec, []byte(body), "config.hcl")
	must.NoError(t, err)
	return b
}

func TestConfigDefaults(t *testing.T) {
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "")}))
	must.Eq(t, &Config{
		Enabled: true, SharesPerGPU: 100, Sharing: "mps",
		MPS: MPSConfig{PipeDirectory: "/tmp/nvidia-mps", LogDirectory: "/var/log/nvidia-mps",
			Daemons: "reservation", Control: "nvidia-cuda-mps-control", DaemonDir: "/run/gpushare-mps", GCAfter: "1h"},
		Interposer: InterposerConfig{Enabled: false, Library: DefaultInterposerLibrary,
			StateDir: DefaultInterposerStateDir, GCAfter: "168h",
			UnifiedMemory: false, UnifiedOversubscriptionPct: 100, TurnMs: DefaultTurnMs},
		IgnoredGPUIDs:     []string{},
		FingerprintPeriod: "1m",
		MIGInstances:      "whole",
		DeviceGroups:      "model",
	}, p.cfg)
	must.Eq(t, time.Minute, p.period)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		"shares_per_gpu = 0":                                               "shares_per_gpu = 0: must be between 1 and 1000",
		"shares_per_gpu = 1001":                                            "shares_per_gpu = 1001: must be between 1 and 1000",
		`sharing = "fair"`:                                                 `sharing = "fair": must be one of "mps", "timeslice" or "exclusive"`,
		`fingerprint_period = "x"`:                                         `fingerprint_period = "x": not a duration`,
		`fingerprint_period = "1ms"`:                                       `fingerprint_period = "1ms": must be at least 100ms`,
		"mps {\n daemons = \"node\"\n pipe_directory = \"\"\n}":            "mps: pipe_directory and log_directory must not be empty",
		"mps {\n daemons = \"both\"\n}":                                    `mps.daemons = "both": must be "reservation" (one MPS control daemon per reservation, started by the plugin) or "node"`,
		"mps {\n daemon_dir = \"run\"\n}":                                  `mps.daemon_dir = "run": must be an absolute directory other than /, at most 48 characters`,
		"mps {\n daemon_dir = \"/" + strings.Repeat("d", 60) + "\"\n}":     "at most 48 characters (UNIX socket paths are short",
		"mps {\n gc_after = \"10s\"\n}":                                    `mps.gc_after = "10s": must be a duration of at least 1m`,
		"mps {\n control = \"\"\n}":                                        `mps.control = "": must name nvidia-cuda-mps-control`,
		"interposer {\n enabled = true\n library = \"lib.so\"\n}":          `interposer.library = "lib.so": must be the absolute path`,
		"interposer {\n enabled = true\n state_dir = \"/\"\n}":             `interposer.state_dir = "/": must be an absolute directory`,
		"interposer {\n enabled = true\n gc_after = \"1s\"\n}":             `interposer.gc_after = "1s": must be a duration of at least 1m`,
		"interposer {\n enabled = true\n library = \"/nonexistent.so\"\n}": "interposer.library: stat /nonexistent.so: no such file or directory; install libgpushare-cuda.so",
		"interposer {\n unified_memory = true\n}":                          "interposer.unified_memory = true: needs interposer.enabled = true",
		"interposer {\n unified_oversubscription_pct = -1\n}":              "interposer.unified_oversubscription_pct = -1: must be between 0 and 1000",
		"interposer {\n context_mib = -1\n}":                               "interposer.context_mib = -1: must be between 0 and 16384",
		"interposer {\n turn_ms = 10001\n}":                                "interposer.turn_ms = 10001: must be between 0 and 10000",
		"interposer {\n unified_oversubscription_pct = 1001\n}":            "interposer.unified_oversubscription_pct = 1001: must be between 0 and 1000",
		`mig_instances = "split"`:                                          `mig_instances = "split": must be "whole" (each MIG instance offered whole, as nvidia/gpushare-mig/<profile>) or "shared"`,
		`mig_instances = ""`:                                               `mig_instances = "": must be "whole"`,
	}
	for body, want := range cases {
		t.Run(body, func(t *testing.T) {
			p := New(hclog.NewNullLogger(), nil)
			err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, body)})
			must.True(t, errors.Is(err, ErrConfig))
			must.ErrorContains(t, err, want)
		})
	}
	// every problem at once
	err := New(hclog.NewNullLogger(), nil).SetConfig(&base.Config{PluginConfig: encodeConfig(t, "shares_per_gpu = 0\nsharing = \"x\"")})
	must.ErrorContains(t, err, "shares_per_gpu")
	must.ErrorContains(t, err, "sharing")
}

// newPlugin configures a plugin on a copy of the named fixture and takes
// its first fingerprint.
func newPlugin(t *testing.T, fixture, extra string) (*Plugin, string, *device.FingerprintResponse) {
	t.Helper()
	path, err := fixtures.WriteTo(fixture, t.TempDir())
	must.NoError(t, err)
	p := New(hclog.NewNullLogger(), nil)
	p.exists = func(string) bool { return false }
	if !strings.Contains(extra, "mps {") {
		// the node's daemon: no per-reservation daemons to start (mpsd_test.go)
		extra += "\nmps {\n daemons = \"node\"\n}"
	}
	cfg := fmt.Sprintf("fixture = %q\nfingerprint_period = \"100ms\"\n%s", path, extra)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := p.Fingerprint(ctx)
	must.NoError(t, err)
	return p, path, next(t, ch)
}

func next(t *testing.T, ch <-chan *device.FingerprintResponse) *device.FingerprintResponse {
	t.Helper()
	select {
	case r := <-ch:
		must.NotNil(t, r)
		return r
	case <-time.After(time.Minute): // liveness only
		t.Fatal("no fingerprint within a minute")
		return nil
	}
}

func TestFingerprintDGX1(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.DGX1V100, "")
	must.NoError(t, fp.Error)
	must.SliceLen(t, 1, fp.Devices)
	g := fp.Devices[0]
	must.NoError(t, g.Validate())
	must.Eq(t, "nvidia", g.Vendor)
	must.Eq(t, "gpushare", g.Type)
	must.Eq(t, "Tesla V100-SXM2-16GB", g.Name)
	must.SliceLen(t, 800, g.Devices)
	must.Eq(t, "GPU-d1000000-0000-4000-8000-000000000000:0", g.Devices[0].ID)
	must.Eq(t, "GPU-d1000000-0000-4000-8000-000000000007:99", g.Devices[799].ID)
	must.Eq(t, "00000000:8A:00.0", g.Devices[799].HwLocality.PciBusID)
	for _, d := range g.Devices {
		must.True(t, d.Healthy)
		must.StrNotContains(t, d.ID, ",")
	}
	must.Eq(t, "NV2,SYS,SYS,SYS,X,NV1,NV1,NV2", *g.Attributes["gpu4.links"].String)
	must.Eq(t, int64(163), *g.Attributes["share_memory"].Int)
	decoded, err := devicefn.DecodeGroup(g.Name, fromSDKAttributes(g.Attributes))
	must.NoError(t, err)
	must.SliceLen(t, 8, decoded.GPUs)
	must.Eq(t, 1, decoded.GPUs[5].NUMANode)
}

func TestFingerprintHealthFollowsFixture(t *testing.T) {
	p, path, _ := newPlugin(t, fixtures.PCIe4GPU, "")
	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	first := next(t, ch)
	must.True(t, first.Devices[0].Devices[100].Healthy)

	src, err := os.ReadFile(path)
	must.NoError(t, err)
	sick := strings.Replace(string(src), "p1000000-0000-4000-8000-000000000001\" {\n", "p1000000-0000-4000-8000-000000000001\" {\n  healthy = false\n  health_reason = \"XID 79: GPU has fallen off the bus\"\n", 1)
	must.NotEq(t, string(src), sick)
	writeLater(t, path, sick)

	fp := next(t, ch)
	devs := fp.Devices[0].Devices
	must.True(t, devs[99].Healthy)
	must.False(t, devs[100].Healthy)
	must.False(t, devs[199].Healthy)
	must.Eq(t, "XID 79: GPU has fallen off the bus", devs[150].HealthDesc)
	must.True(t, devs[200].Healthy)

	_, err = p.Reserve([]string{"GPU-p1000000-0000-4000-8000-000000000001:3"})
	must.True(t, errors.Is(err, ErrUnhealthyShare))
	must.ErrorContains(t, err, "XID 79")

	writeLater(t, path, string(src))
	fp = next(t, ch)
	must.True(t, fp.Devices[0].Devices[150].Healthy)
}

func writeLater(t *testing.T, path, content string) {
	t.Helper()
	must.NoError(t, fixture.Rewrite(path, []byte(content)))
}

func TestFingerprintBrokenFixtureIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpus.hcl")
	must.NoError(t, os.WriteFile(path, []byte("gpu \"GPU-a\" {\n  model = 3\n"), 0o644))
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, fmt.Sprintf("fixture = %q", path))}))
	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	fp := next(t, ch)
	must.ErrorContains(t, fp.Error, "gpus.hcl:")
}

type unavailableSource struct{}

func (unavailableSource) Name() string { return "nvml" }
func (unavailableSource) Inventory(context.Context) (*devicefn.Inventory, error) {
	return nil, fmt.Errorf("%w: NVML library not found", devicefn.ErrUnavailable)
}
func (unavailableSource) Health(context.Context) ([]devicefn.Health, error) { return nil, nil }
func (unavailableSource) Stats(context.Context) ([]devicefn.Stats, error)   { return nil, nil }
func (unavailableSource) Close() error                                      { return nil }

func TestNoNVMLMeansNoDevices(t *testing.T) {
	p := New(hclog.NewNullLogger(), func(*Config, hclog.Logger) (devicefn.Source, error) { return unavailableSource{}, nil })
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "")}))
	ch, err := p.Fingerprint(t.Context())
	must.NoError(t, err)
	fp := next(t, ch)
	must.NoError(t, fp.Error)
	must.SliceEmpty(t, fp.Devices)
}

func TestDisabled(t *testing.T) {
	p := New(hclog.NewNullLogger(), nil)
	must.NoError(t, p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, "enabled = false")}))
	_, err := p.Fingerprint(t.Context())
	must.ErrorIs(t, err, device.ErrPluginDisabled)
}

func TestIgnoredGPUs(t *testing.T) {
	_, _, fp := newPlugin(t, fixtures.PCIe4GPU, `ignored_gpu_ids = ["GPU-p1000000-0000-4000-8000-000000000000"]`)
	must.SliceLen(t, 300, fp.Devices[0].Devices)
	must.Eq(t, int64(3), *fp.Devices[0].Attributes["gpus"].Int)
}

func TestStats(t *testing.T) {
	p, _, _ := newPlugin(t, fixtures.HGXH100, "")
	ch, err := p.Stats(t.Context(), 50*time.Millisecond)
	must.NoError(t, err)
	var resp *device.StatsResponse
	select {
	case resp = <-ch:
	case <-time.After(time.Minute): // liveness only
		t.Fatal("no stats")
	}
	must.NoError(t, resp.Error)
	must.SliceLen(t, 1, resp.Groups)
	must.MapLen(t, 800, resp.Groups[0].InstanceStats)
	s := resp.Groups[0].InstanceStats["GPU-h1000000-0000-4000-8000-000000000003:42"]
	must.NotNil(t, s)
	must.Eq(t, int64(81559), *s.Stats.Attributes[StatMemoryUsed].IntDenominatorVal)
	must.MapContainsKeys(t, s.Stats.Attributes, []string{StatUtilization, StatPower, StatTemperature, StatMemoryUtilization})
}

// Nomad refuses to load a plugin whose version it cannot parse
// (helper/pluginutils/loader: version.NewVersion), leaving the client
// without GPUs: whatever the build stamped, PluginInfo reports one it can.
func TestPluginVersionIsParseable(t *testing.T) {
	defer func(v string) { version.Version = v }(version.Version)
	for in, want := range map[string]string{
		"v0.1.0-dev":               "v0.1.0-dev",
		"v0.1.0-dev+b0a6d7d-dirty": "v0.1.0-dev+b0a6d7d-dirty",
		"161dba4":                  "161dba4", // 161 with a pre-release: Nomad accepts it
		"b0a6d7d":                  "v0.0.0+b0a6d7d",
		"dev build":                "v0.0.0+dev-build",
		"":                         "v0.0.0",
	} {
		version.Version = in
		info, err := (&Plugin{}).PluginInfo()
		must.NoError(t, err)
		must.EqOp(t, want, info.PluginVersion, must.Sprintf("version %q", in))
		_, err = goversion.NewVersion(info.PluginVersion)
		must.NoError(t, err, must.Sprintf("Nomad would refuse %q", info.PluginVersion))
	}
}
