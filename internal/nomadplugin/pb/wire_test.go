package pb

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The files in testdata are messages that Nomad 1.11.3's own generated
// code (plugins/base/proto, plugins/device/proto,
// plugins/shared/structs/proto, plugins/shared/hclspec) marshalled,
// deterministically, with every field set. The same messages built with
// this package marshal to the same bytes, and the bytes unmarshal to the
// same messages: the .proto files here carry Nomad's field numbers and
// types, so Nomad and the plugin read each other's messages.
func TestWireFormatIsNomads(t *testing.T) {
	spec := &Spec{Block: &Spec_Object{Object: &Object{Attributes: map[string]*Spec{
		"a": {Block: &Spec_Default{Default: &Default{
			Primary: &Spec{Block: &Spec_Attr{Attr: &Attr{Name: "a", Type: "list(string)"}}},
			Default: &Spec{Block: &Spec_Literal{Literal: &Literal{Value: "[]"}}},
		}}},
		"b": {Block: &Spec_BlockValue{BlockValue: &Block{Name: "b", Required: true, Nested: &Spec{Block: &Spec_Object{Object: &Object{Attributes: map[string]*Spec{
			"c": {Block: &Spec_Attr{Attr: &Attr{Name: "c", Type: "number", Required: true}}},
		}}}}}}},
		"d": {Block: &Spec_Array{Array: &Array{Values: []*Spec{
			{Block: &Spec_Attr{Attr: &Attr{Name: "e", Type: "bool"}}},
			{Block: &Spec_Literal{Literal: &Literal{Value: "true"}}},
		}}}},
		"f": {Block: &Spec_BlockAttrs{BlockAttrs: &BlockAttrs{Name: "f", Type: "string"}}},
		"g": {Block: &Spec_BlockList{BlockList: &BlockList{Name: "g", MinItems: 1, MaxItems: 3,
			Nested: &Spec{Block: &Spec_Attr{Attr: &Attr{Name: "h", Type: "string"}}}}}},
		"i": {Block: &Spec_BlockSet{BlockSet: &BlockSet{Name: "i", MinItems: 2, MaxItems: 4,
			Nested: &Spec{Block: &Spec_Attr{Attr: &Attr{Name: "h", Type: "string"}}}}}},
		"j": {Block: &Spec_BlockMap{BlockMap: &BlockMap{Name: "j", Labels: []string{"k", "l"},
			Nested: &Spec{Block: &Spec_Attr{Attr: &Attr{Name: "h", Type: "string"}}}}}},
	}}}}
	cases := map[string]proto.Message{
		"config_schema_response": &ConfigSchemaResponse{Spec: spec},
		"plugin_info_response":   &PluginInfoResponse{Type: PluginType_DEVICE, PluginApiVersions: []string{"v0.1.0"}, PluginVersion: "v1.2.3", Name: "gpushare"},
		"set_config_request": &SetConfigRequest{MsgpackConfig: []byte{0x81, 0xa1, 'a', 0x01},
			NomadConfig: &NomadConfig{Driver: &NomadDriverConfig{ClientMaxPort: 14999, ClientMinPort: 14000}}, PluginApiVersion: "v0.1.0"},
		"fingerprint_response": &FingerprintResponse{DeviceGroup: []*DeviceGroup{{
			Vendor: "nvidia", DeviceType: "gpushare", DeviceName: "A100",
			Devices: []*DetectedDevice{{ID: "GPU-1/0", Healthy: true, HealthDescription: "ok", HwLocality: &DeviceLocality{PciBusId: "0000:01:00.0"}}, {ID: "GPU-1/1"}},
			Attributes: map[string]*Attribute{
				"i": {Value: &Attribute_IntVal{IntVal: -7}, Unit: "MiB"},
				"f": {Value: &Attribute_FloatVal{FloatVal: 1.5}},
				"s": {Value: &Attribute_StringVal{StringVal: "x"}},
				"b": {Value: &Attribute_BoolVal{BoolVal: true}},
			},
		}}},
		"reserve_request": &ReserveRequest{DeviceIds: []string{"a", "b"}},
		"reserve_response": &ReserveResponse{ContainerRes: &ContainerReservation{
			Envs:    map[string]string{"A": "1", "B": "2"},
			Mounts:  []*Mount{{TaskPath: "/t", HostPath: "/h", ReadOnly: true}},
			Devices: []*DeviceSpec{{TaskPath: "/dev/nvidia0", HostPath: "/dev/nvidia0", Permissions: "rw"}},
		}},
		"stats_request": &StatsRequest{CollectionInterval: durationpb.New(2500 * time.Millisecond)},
		"stats_response": &StatsResponse{Groups: []*DeviceGroupStats{{
			Vendor: "nvidia", Type: "gpushare", Name: "A100",
			InstanceStats: map[string]*DeviceStats{"GPU-1/0": {
				Summary: &StatValue{IntNumeratorVal: wrapperspb.Int64(3), IntDenominatorVal: wrapperspb.Int64(4), Unit: "MiB", Desc: "d"},
				Stats: &StatObject{
					Nested:     map[string]*StatObject{"n": {Attributes: map[string]*StatValue{"x": {BoolVal: wrapperspb.Bool(true)}}}},
					Attributes: map[string]*StatValue{"f": {FloatNumeratorVal: wrapperspb.Double(0.5), FloatDenominatorVal: wrapperspb.Double(2), StringVal: wrapperspb.String("s")}},
				},
				Timestamp: timestamppb.New(time.Unix(1700000000, 123)),
			}},
		}}},
	}
	for name, msg := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", name+".bin"))
			must.NoError(t, err)
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
			must.NoError(t, err)
			must.Eq(t, want, got)
			back := msg.ProtoReflect().New().Interface()
			must.NoError(t, proto.Unmarshal(want, back))
			must.True(t, proto.Equal(msg, back), must.Sprintf("%v", back))
			must.SliceEmpty(t, back.ProtoReflect().GetUnknown())
		})
	}
}

// The gRPC methods are the ones Nomad 1.11.3's client calls.
func TestMethodNamesAreNomads(t *testing.T) {
	for got, want := range map[string]string{
		BasePlugin_PluginInfo_FullMethodName:    "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo",
		BasePlugin_ConfigSchema_FullMethodName:  "/hashicorp.nomad.plugins.base.proto.BasePlugin/ConfigSchema",
		BasePlugin_SetConfig_FullMethodName:     "/hashicorp.nomad.plugins.base.proto.BasePlugin/SetConfig",
		DevicePlugin_Fingerprint_FullMethodName: "/hashicorp.nomad.plugins.device.DevicePlugin/Fingerprint",
		DevicePlugin_Reserve_FullMethodName:     "/hashicorp.nomad.plugins.device.DevicePlugin/Reserve",
		DevicePlugin_Stats_FullMethodName:       "/hashicorp.nomad.plugins.device.DevicePlugin/Stats",
	} {
		must.EqOp(t, want, got)
	}
	must.True(t, DevicePlugin_ServiceDesc.Streams[0].ServerStreams)
	must.EqOp(t, "Fingerprint", DevicePlugin_ServiceDesc.Streams[0].StreamName)
	must.True(t, DevicePlugin_ServiceDesc.Streams[1].ServerStreams)
	must.EqOp(t, "Stats", DevicePlugin_ServiceDesc.Streams[1].StreamName)
}
