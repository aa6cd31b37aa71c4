package plugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/fixtures"
	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/shoenig/test/must"
	"google.golang.org/protobuf/types/known/durationpb"
)

// served is the plugin served over go-plugin's gRPC transport in process,
// with clients of the generated protocol code, as Nomad's client talks to
// it.
func served(t *testing.T, p *Plugin) (pb.BasePluginClient, pb.DevicePluginClient) {
	t.Helper()
	client, _ := goplugin.TestPluginGRPCConn(t, false, device.Plugins(p))
	t.Cleanup(func() { _ = client.Close() })
	return pb.NewBasePluginClient(client.Conn), pb.NewDevicePluginClient(client.Conn)
}

// The protocol end to end: what Nomad's client calls, in the order it
// calls it, answered by the plugin on a fixture DGX-1.
func TestServedOverTheProtocol(t *testing.T) {
	path, err := fixtures.WriteTo(fixtures.DGX1V100, t.TempDir())
	must.NoError(t, err)
	p := New(hclog.NewNullLogger(), nil)
	p.exists = func(path string) bool { return path == "/dev/nvidiactl" }
	bc, dc := served(t, p)
	ctx := t.Context()

	info, err := bc.PluginInfo(ctx, &pb.PluginInfoRequest{})
	must.NoError(t, err)
	must.EqOp(t, pb.PluginType_DEVICE, info.GetType())
	must.Eq(t, []string{device.ApiVersion010}, info.GetPluginApiVersions())
	must.EqOp(t, "gpushare", info.GetName())
	must.EqOp(t, pluginVersion(), info.GetPluginVersion())

	// the schema Nomad receives decodes the config as the plugin's own
	schema, err := bc.ConfigSchema(ctx, &pb.ConfigSchemaRequest{})
	must.NoError(t, err)
	// per-reservation MPS daemons (the default) through the fake control
	// (mpsd_test.go): the host needs no NVIDIA MPS tools
	wd, err := os.Getwd()
	must.NoError(t, err)
	t.Setenv("FAKE_MPS_RECORD", filepath.Join(t.TempDir(), "record"))
	hcl := fmt.Sprintf("shares_per_gpu = 10\nfingerprint_period = \"100ms\"\nfixture = %q\nmps {\n control = %q\n daemon_dir = %q\n}",
		path, filepath.Join(wd, "testdata", "fake-mps-control"), filepath.Join(shortTempDir(t), "d"))
	cfg, err := hclspec.EncodeHCL(schema.GetSpec(), []byte(hcl), "client.hcl")
	must.NoError(t, err)
	_, err = bc.SetConfig(ctx, &pb.SetConfigRequest{MsgpackConfig: cfg, PluginApiVersion: device.ApiVersion010})
	must.NoError(t, err)
	must.EqOp(t, 10, p.cfg.SharesPerGPU)

	bad, err := hclspec.EncodeHCL(schema.GetSpec(), []byte("shares_per_gpu = 0"), "client.hcl")
	must.NoError(t, err)
	_, err = bc.SetConfig(ctx, &pb.SetConfigRequest{MsgpackConfig: bad})
	must.ErrorContains(t, err, "SetConfig failed: invalid gpushare plugin config: shares_per_gpu = 0: must be between 1 and 1000")
	_, err = bc.SetConfig(ctx, &pb.SetConfigRequest{MsgpackConfig: cfg})
	must.NoError(t, err)

	fp, err := dc.Fingerprint(ctx, &pb.FingerprintRequest{})
	must.NoError(t, err)
	first, err := fp.Recv()
	must.NoError(t, err)
	must.SliceLen(t, 1, first.GetDeviceGroup())
	g := first.GetDeviceGroup()[0]
	must.EqOp(t, "nvidia", g.GetVendor())
	must.EqOp(t, "gpushare", g.GetDeviceType())
	must.EqOp(t, "Tesla V100-SXM2-16GB", g.GetDeviceName())
	must.SliceLen(t, 80, g.GetDevices())
	must.EqOp(t, v100+"0:0", g.GetDevices()[0].GetID())
	must.True(t, g.GetDevices()[0].GetHealthy(), must.Sprint(g.GetDevices()[0].GetHealthDescription()))
	must.EqOp(t, "00000000:8A:00.0", g.GetDevices()[79].GetHwLocality().GetPciBusId())
	must.EqOp(t, "NV2,SYS,SYS,SYS,X,NV1,NV1,NV2", g.GetAttributes()["gpu4.links"].GetStringVal())

	res, err := dc.Reserve(ctx, &pb.ReserveRequest{DeviceIds: shares(3, 0, 5)})
	must.NoError(t, err)
	must.EqOp(t, v100+"3", res.GetContainerRes().GetEnvs()[EnvCUDAVisible])
	must.EqOp(t, "5", res.GetContainerRes().GetEnvs()[EnvShares])
	must.SliceLen(t, 1, res.GetContainerRes().GetDevices())
	must.EqOp(t, "rw", res.GetContainerRes().GetDevices()[0].GetPermissions())
	must.SliceNotEmpty(t, res.GetContainerRes().GetMounts())
	_, err = dc.Reserve(ctx, &pb.ReserveRequest{DeviceIds: []string{"GPU-nope:0"}})
	must.ErrorContains(t, err, "GPU-nope")

	st, err := dc.Stats(ctx, &pb.StatsRequest{CollectionInterval: durationpb.New(50 * time.Millisecond)})
	must.NoError(t, err)
	sample, err := st.Recv()
	must.NoError(t, err)
	must.SliceLen(t, 1, sample.GetGroups())
	s := sample.GetGroups()[0].GetInstanceStats()[v100+"3:0"]
	must.NotNil(t, s)
	must.EqOp(t, "MiB", s.GetSummary().GetUnit())
	must.Positive(t, s.GetSummary().GetIntDenominatorVal().GetValue())
	must.MapContainsKey(t, s.GetStats().GetAttributes(), StatUtilization)
	must.False(t, s.GetTimestamp().AsTime().IsZero())
}

// A disabled plugin ends the fingerprint stream with ErrPluginDisabled's
// message, which Nomad's client logs before it stops fingerprinting.
func TestServedDisabled(t *testing.T) {
	p := New(hclog.NewNullLogger(), nil)
	bc, dc := served(t, p)
	cfg, err := hclspec.EncodeHCL(configSpec, []byte("enabled = false"), "client.hcl")
	must.NoError(t, err)
	_, err = bc.SetConfig(t.Context(), &pb.SetConfigRequest{MsgpackConfig: cfg})
	must.NoError(t, err)
	fp, err := dc.Fingerprint(t.Context(), &pb.FingerprintRequest{})
	must.NoError(t, err)
	_, err = fp.Recv()
	must.ErrorContains(t, err, device.ErrPluginDisabled.Error())
}

// The config as a Nomad 1.11.3 client sends it: testdata/nomad-config
// holds, for each .hcl plugin block, the msgpack that Nomad's own code
// (hclspecutils.Convert, hclutils.ParseHclInterface, cty msgpack) made of
// it against the schema of the time (nomadRefSpec), and the Config the
// plugin decoded from it with Nomad's SDK (.json). Our encoder makes the
// same bytes of that schema; with today's schema the plugin decodes the
// same block to the same Config, the mps block's later fields at their
// defaults.
func TestConfigAsNomadSendsIt(t *testing.T) {
	files, err := filepath.Glob("testdata/nomad-config/*.hcl")
	must.NoError(t, err)
	must.SliceNotEmpty(t, files)
	for _, f := range files {
		stem := strings.TrimSuffix(f, ".hcl")
		t.Run(filepath.Base(stem), func(t *testing.T) {
			src, err := os.ReadFile(f)
			must.NoError(t, err)
			nomads, err := os.ReadFile(stem + ".msgpack")
			must.NoError(t, err)
			ours, err := hclspec.EncodeHCL(nomadRefSpec, src, f)
			must.NoError(t, err)
			must.Eq(t, nomads, ours)

			now, err := hclspec.EncodeHCL(configSpec, src, f)
			must.NoError(t, err)
			p := New(hclog.NewNullLogger(), nil)
			must.NoError(t, p.SetConfig(&base.Config{PluginConfig: now}))
			want, err := os.ReadFile(stem + ".json")
			must.NoError(t, err)
			var wantCfg Config
			must.NoError(t, json.Unmarshal(want, &wantCfg))
			m := &wantCfg.MPS
			m.Daemons, m.Control, m.DaemonDir, m.GCAfter = MPSDaemonsReservation, DefaultMPSControl, DefaultMPSDaemonDir, "1h"
			wantCfg.MIGInstances = devicefn.MIGWhole // added after the reference
			wantCfg.DeviceGroups = devicefn.DeviceGroupsModel
			wantCfg.Interposer.TurnMs = DefaultTurnMs
			must.Eq(t, &wantCfg, p.cfg)
		})
	}
}
