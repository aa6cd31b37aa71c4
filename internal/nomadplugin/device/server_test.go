package device

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/shoenig/test/must"
)

// fake is a device plugin whose answers a test sets.
type fake struct {
	info     *base.PluginInfoResponse
	cfg      *base.Config
	fps      []*FingerprintResponse
	interval time.Duration
}

var _ DevicePlugin = (*fake)(nil)

func (f *fake) PluginInfo() (*base.PluginInfoResponse, error) { return f.info, nil }
func (f *fake) ConfigSchema() (*hclspec.Spec, error) {
	return hclspec.NewObject(map[string]*hclspec.Spec{"a": hclspec.NewAttr("a", "string", false)}), nil
}
func (f *fake) SetConfig(c *base.Config) error { f.cfg = c; return nil }

func (f *fake) Fingerprint(ctx context.Context) (<-chan *FingerprintResponse, error) {
	ch := make(chan *FingerprintResponse)
	go func() {
		defer close(ch)
		for _, r := range f.fps {
			select {
			case <-ctx.Done():
				return
			case ch <- r:
			}
		}
	}()
	return ch, nil
}

func (f *fake) Reserve(ids []string) (*ContainerReservation, error) {
	if len(ids) == 0 {
		return nil, errors.New("no devices")
	}
	return &ContainerReservation{Envs: map[string]string{"IDS": ids[0]}, Mounts: []*Mount{nil, {TaskPath: "/t"}}}, nil
}

func (f *fake) Stats(ctx context.Context, interval time.Duration) (<-chan *StatsResponse, error) {
	f.interval = interval
	ch := make(chan *StatsResponse, 2)
	one := int64(1)
	ch <- &StatsResponse{Groups: []*DeviceGroupStats{{Vendor: "v", Type: "t", Name: "n",
		InstanceStats: map[string]*DeviceStats{"a": {Summary: &structs.StatValue{IntNumeratorVal: &one}, Timestamp: time.Unix(5, 0)}, "nil": nil}}}}
	ch <- NewStatsError(errors.New("sampling failed"))
	close(ch)
	return ch, nil
}

func serve(t *testing.T, f *fake) (pb.BasePluginClient, pb.DevicePluginClient) {
	t.Helper()
	c, _ := plugin.TestPluginGRPCConn(t, false, Plugins(f))
	t.Cleanup(func() { _ = c.Close() })
	return pb.NewBasePluginClient(c.Conn), pb.NewDevicePluginClient(c.Conn)
}

func TestServer(t *testing.T) {
	s := "x"
	f := &fake{
		info: &base.PluginInfoResponse{Type: base.PluginTypeDevice, PluginApiVersions: []string{ApiVersion010}, PluginVersion: "v1.0.0", Name: "fake"},
		fps: []*FingerprintResponse{
			NewFingerprint(&DeviceGroup{Vendor: "v", Type: "t", Name: "n",
				Devices:    []*Device{{ID: "d0", Healthy: true}, nil, {ID: "d1", HwLocality: &DeviceLocality{PciBusID: "p"}}},
				Attributes: map[string]*structs.Attribute{"s": {String: &s}}}),
			NewFingerprintError(errors.New("lost the devices")),
		},
	}
	bc, dc := serve(t, f)
	ctx := t.Context()

	// the base client sees what Nomad's would
	bcl := &base.Client{Client: bc, DoneCtx: ctx}
	info, err := bcl.PluginInfo()
	must.NoError(t, err)
	must.Eq(t, f.info, info)
	_, err = bc.SetConfig(ctx, &pb.SetConfigRequest{MsgpackConfig: []byte{0x80}, PluginApiVersion: ApiVersion010,
		NomadConfig: &pb.NomadConfig{Driver: &pb.NomadDriverConfig{ClientMinPort: 1, ClientMaxPort: 2}}})
	must.NoError(t, err)
	must.Eq(t, &base.Config{ApiVersion: ApiVersion010, PluginConfig: []byte{0x80}, AgentConfig: &base.AgentConfig{}}, f.cfg,
		must.Sprint("a device plugin receives no driver config"))

	fp, err := dc.Fingerprint(ctx, &pb.FingerprintRequest{})
	must.NoError(t, err)
	r, err := fp.Recv()
	must.NoError(t, err)
	g := r.GetDeviceGroup()[0]
	must.SliceLen(t, 2, g.GetDevices())
	must.EqOp(t, "p", g.GetDevices()[1].GetHwLocality().GetPciBusId())
	must.EqOp(t, "x", g.GetAttributes()["s"].GetStringVal())
	_, err = fp.Recv()
	must.ErrorContains(t, err, "lost the devices")

	res, err := dc.Reserve(ctx, &pb.ReserveRequest{DeviceIds: []string{"d0"}})
	must.NoError(t, err)
	must.EqOp(t, "d0", res.GetContainerRes().GetEnvs()["IDS"])
	must.SliceLen(t, 1, res.GetContainerRes().GetMounts())
	_, err = dc.Reserve(ctx, &pb.ReserveRequest{})
	must.ErrorContains(t, err, "no devices")

	st, err := dc.Stats(ctx, &pb.StatsRequest{})
	must.NoError(t, err)
	sr, err := st.Recv()
	must.NoError(t, err)
	must.EqOp(t, time.Second, f.interval, must.Sprint("no interval: Nomad's default of 1s"))
	must.MapLen(t, 1, sr.GetGroups()[0].GetInstanceStats())
	must.EqOp(t, int64(1), sr.GetGroups()[0].GetInstanceStats()["a"].GetSummary().GetIntNumeratorVal().GetValue())
	must.EqOp(t, int64(5), sr.GetGroups()[0].GetInstanceStats()["a"].GetTimestamp().GetSeconds())
	_, err = st.Recv()
	must.ErrorContains(t, err, "sampling failed")

	f.info = &base.PluginInfoResponse{Type: "gizmo"}
	_, err = bc.PluginInfo(ctx, &pb.PluginInfoRequest{})
	must.ErrorContains(t, err, `plugin is of unknown type "gizmo"`)
}

func TestValidate(t *testing.T) {
	s, i := "x", int64(1)
	must.NoError(t, (&DeviceGroup{Vendor: "v", Type: "t", Name: "n", Devices: []*Device{{ID: "a"}},
		Attributes: map[string]*structs.Attribute{"m": {Int: &i, Unit: structs.UnitMiB}}}).Validate())
	err := (&DeviceGroup{Devices: []*Device{nil, {}}, Attributes: map[string]*structs.Attribute{
		"u": {Int: &i, Unit: "parsecs"}, "s": {String: &s, Unit: "MiB"}, "none": {}, "two": {Int: &i, String: &s}}}).Validate()
	for _, want := range []string{"vendor must be specified", "type must be specified", "name must be specified", "device 0 is nil",
		"device 1: device ID must be specified", `"u" invalid: unrecognized unit "parsecs"`, `"s" invalid: unit can not be specified`,
		`"none" invalid: no attribute value set`, `"two" invalid: only one attribute value may be set`} {
		must.ErrorContains(t, err, want)
	}
}
