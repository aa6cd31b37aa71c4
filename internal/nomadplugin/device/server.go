package device

import (
	"context"
	"fmt"
	"time"

	"github.com/gpushare/gpushare/internal/nomadplugin/base"
	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// PluginDevice serves a DevicePlugin's device service with go-plugin's
// gRPC transport. Its client side is the generated pb.DevicePluginClient.
type PluginDevice struct {
	plugin.NetRPCUnsupportedPlugin
	Impl DevicePlugin
}

var _ plugin.GRPCPlugin = (*PluginDevice)(nil)

// GRPCServer implements plugin.GRPCPlugin.
func (p *PluginDevice) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterDevicePluginServer(s, &server{impl: p.Impl})
	return nil
}

// GRPCClient implements plugin.GRPCPlugin: a pb.DevicePluginClient.
func (p *PluginDevice) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewDevicePluginClient(c), nil
}

// Plugins is the plugin set a device plugin serves: the base service and
// the device service, under the names Nomad dispenses them by.
func Plugins(dev DevicePlugin) map[string]plugin.Plugin {
	return map[string]plugin.Plugin{
		base.PluginTypeBase:   &base.PluginBase{Impl: dev},
		base.PluginTypeDevice: &PluginDevice{Impl: dev},
	}
}

// Serve serves dev to the Nomad client that started this process, until
// the client closes the connection.
func Serve(dev DevicePlugin, logger hclog.Logger) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: base.Handshake,
		Plugins:         Plugins(dev),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}

// server exposes a DevicePlugin over gRPC.
type server struct {
	pb.UnimplementedDevicePluginServer
	impl DevicePlugin
}

func (s *server) Fingerprint(_ *pb.FingerprintRequest, stream pb.DevicePlugin_FingerprintServer) error {
	ctx := stream.Context()
	ch, err := s.impl.Fingerprint(ctx)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-ch:
			if !ok {
				return nil
			}
			if resp.Error != nil {
				return resp.Error
			}
			if err := stream.Send(FingerprintProto(resp)); err != nil {
				return err
			}
		}
	}
}

func (s *server) Reserve(_ context.Context, req *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	res, err := s.impl.Reserve(req.GetDeviceIds())
	if err != nil {
		return nil, err
	}
	return &pb.ReserveResponse{ContainerRes: ReservationProto(res)}, nil
}

func (s *server) Stats(req *pb.StatsRequest, stream pb.DevicePlugin_StatsServer) error {
	ctx := stream.Context()
	interval := time.Second // Nomad's default when the request has none
	if d := req.GetCollectionInterval(); d != nil {
		if err := d.CheckValid(); err != nil {
			return fmt.Errorf("invalid stats collection interval: %w", err)
		}
		if d.AsDuration() > 0 {
			interval = d.AsDuration()
		}
	}
	ch, err := s.impl.Stats(ctx, interval)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case resp, ok := <-ch:
			if !ok {
				return nil
			}
			if resp.Error != nil {
				return resp.Error
			}
			if err := stream.Send(StatsProto(resp)); err != nil {
				return err
			}
		}
	}
}

// FingerprintProto is the fingerprint as the protocol carries it.
func FingerprintProto(in *FingerprintResponse) *pb.FingerprintResponse {
	out := &pb.FingerprintResponse{}
	for _, g := range in.Devices {
		if g == nil {
			continue
		}
		pg := &pb.DeviceGroup{
			Vendor:     g.Vendor,
			DeviceType: g.Type,
			DeviceName: g.Name,
			Attributes: structs.AttributeMapProto(g.Attributes),
		}
		for _, d := range g.Devices {
			if d == nil {
				continue
			}
			pd := &pb.DetectedDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc}
			if d.HwLocality != nil {
				pd.HwLocality = &pb.DeviceLocality{PciBusId: d.HwLocality.PciBusID}
			}
			pg.Devices = append(pg.Devices, pd)
		}
		out.DeviceGroup = append(out.DeviceGroup, pg)
	}
	return out
}

// ReservationProto is the reservation as the protocol carries it.
func ReservationProto(in *ContainerReservation) *pb.ContainerReservation {
	if in == nil {
		return nil
	}
	out := &pb.ContainerReservation{Envs: in.Envs}
	for _, m := range in.Mounts {
		if m != nil {
			out.Mounts = append(out.Mounts, &pb.Mount{TaskPath: m.TaskPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
		}
	}
	for _, d := range in.Devices {
		if d != nil {
			out.Devices = append(out.Devices, &pb.DeviceSpec{TaskPath: d.TaskPath, HostPath: d.HostPath, Permissions: d.CgroupPerms})
		}
	}
	return out
}

// StatsProto is the statistics as the protocol carries them.
func StatsProto(in *StatsResponse) *pb.StatsResponse {
	out := &pb.StatsResponse{}
	for _, g := range in.Groups {
		if g == nil {
			continue
		}
		pg := &pb.DeviceGroupStats{Vendor: g.Vendor, Type: g.Type, Name: g.Name,
			InstanceStats: make(map[string]*pb.DeviceStats, len(g.InstanceStats))}
		for id, s := range g.InstanceStats {
			if s == nil {
				continue
			}
			pg.InstanceStats[id] = &pb.DeviceStats{
				Summary:   structs.StatValueProto(s.Summary),
				Stats:     structs.StatObjectProto(s.Stats),
				Timestamp: timestamppb.New(s.Timestamp),
			}
		}
		out.Groups = append(out.Groups, pg)
	}
	return out
}
