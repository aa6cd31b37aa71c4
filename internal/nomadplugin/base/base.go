package base

import (
	"context"
	"fmt"

	"github.com/gpushare/gpushare/internal/nomadplugin/hclspec"
	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Plugin types: the names under which a plugin's services are dispensed,
// and what PluginInfo says the plugin is.
const (
	PluginTypeBase   = "base"
	PluginTypeDriver = "driver"
	PluginTypeDevice = "device"
)

// Handshake is what Nomad and its plugins agree on before they talk:
// go-plugin protocol version 2 (gRPC) and Nomad's magic cookie, which a
// plugin started by hand sees missing and so says it is a Nomad plugin.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// BasePlugin is what every Nomad plugin implements.
type BasePlugin interface {
	// PluginInfo says what the plugin is and which API versions it speaks.
	PluginInfo() (*PluginInfoResponse, error)
	// ConfigSchema is the schema of the plugin's config block.
	ConfigSchema() (*hclspec.Spec, error)
	// SetConfig hands the plugin its config; an error fails the client's
	// start with it.
	SetConfig(c *Config) error
}

// PluginInfoResponse says what a plugin is.
type PluginInfoResponse struct {
	// Type is PluginTypeDevice or PluginTypeDriver.
	Type string
	// PluginApiVersions are the API versions the plugin speaks (for a
	// device plugin, device.ApiVersion010).
	PluginApiVersions []string
	// PluginVersion is the plugin's semantic version.
	PluginVersion string
	// Name is the name of the plugin block in the client's config.
	Name string
}

// Config is what SetConfig receives.
type Config struct {
	// ApiVersion is the API version Nomad chose from PluginApiVersions.
	ApiVersion string
	// PluginConfig is the plugin's config block, decoded against its
	// schema and encoded as cty msgpack: read it with hclspec.Decode.
	PluginConfig []byte
	// AgentConfig is the part of the agent's config a plugin of this type
	// receives (nothing, for a device plugin).
	AgentConfig *AgentConfig
}

// AgentConfig is the agent's config a plugin may use.
type AgentConfig struct {
	Driver *ClientDriverConfig
}

// ClientDriverConfig is the agent's config a task driver receives.
type ClientDriverConfig struct {
	ClientMinPort uint
	ClientMaxPort uint
}

// PluginBase serves a BasePlugin with go-plugin's gRPC transport, and
// dispenses a client of one.
type PluginBase struct {
	plugin.NetRPCUnsupportedPlugin
	Impl BasePlugin
}

var _ plugin.GRPCPlugin = (*PluginBase)(nil)

// GRPCServer implements plugin.GRPCPlugin.
func (p *PluginBase) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterBasePluginServer(s, &server{impl: p.Impl})
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *PluginBase) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{Client: pb.NewBasePluginClient(c), DoneCtx: ctx}, nil
}

// server exposes a BasePlugin over gRPC.
type server struct {
	pb.UnimplementedBasePluginServer
	impl BasePlugin
}

func (s *server) PluginInfo(context.Context, *pb.PluginInfoRequest) (*pb.PluginInfoResponse, error) {
	info, err := s.impl.PluginInfo()
	if err != nil {
		return nil, err
	}
	var t pb.PluginType
	switch info.Type {
	case PluginTypeDevice:
		t = pb.PluginType_DEVICE
	case PluginTypeDriver:
		t = pb.PluginType_DRIVER
	default:
		return nil, fmt.Errorf("plugin is of unknown type %q: want %q or %q", info.Type, PluginTypeDevice, PluginTypeDriver)
	}
	return &pb.PluginInfoResponse{
		Type:              t,
		PluginApiVersions: info.PluginApiVersions,
		PluginVersion:     info.PluginVersion,
		Name:              info.Name,
	}, nil
}

func (s *server) ConfigSchema(context.Context, *pb.ConfigSchemaRequest) (*pb.ConfigSchemaResponse, error) {
	spec, err := s.impl.ConfigSchema()
	if err != nil {
		return nil, err
	}
	return &pb.ConfigSchemaResponse{Spec: spec}, nil
}

func (s *server) SetConfig(_ context.Context, req *pb.SetConfigRequest) (*pb.SetConfigResponse, error) {
	info, err := s.impl.PluginInfo()
	if err != nil {
		return nil, err
	}
	// Nomad passes each plugin type only its part of the agent's config.
	agent := &AgentConfig{}
	if d := req.GetNomadConfig().GetDriver(); d != nil && info.Type == PluginTypeDriver {
		agent.Driver = &ClientDriverConfig{ClientMinPort: uint(d.GetClientMinPort()), ClientMaxPort: uint(d.GetClientMaxPort())}
	}
	err = s.impl.SetConfig(&Config{
		ApiVersion:   req.GetPluginApiVersion(),
		PluginConfig: req.GetMsgpackConfig(),
		AgentConfig:  agent,
	})
	if err != nil {
		return nil, fmt.Errorf("SetConfig failed: %w", err)
	}
	return &pb.SetConfigResponse{}, nil
}

// Client is a BasePlugin served by another process, as Nomad's client
// sees it.
type Client struct {
	Client pb.BasePluginClient
	// DoneCtx is cancelled when the plugin's connection closes.
	DoneCtx context.Context
}

var _ BasePlugin = (*Client)(nil)

// PluginInfo implements BasePlugin.
func (c *Client) PluginInfo() (*PluginInfoResponse, error) {
	resp, err := c.Client.PluginInfo(c.DoneCtx, &pb.PluginInfoRequest{})
	if err != nil {
		return nil, err
	}
	out := &PluginInfoResponse{
		PluginApiVersions: resp.GetPluginApiVersions(),
		PluginVersion:     resp.GetPluginVersion(),
		Name:              resp.GetName(),
	}
	switch resp.GetType() {
	case pb.PluginType_DEVICE:
		out.Type = PluginTypeDevice
	case pb.PluginType_DRIVER:
		out.Type = PluginTypeDriver
	default:
		return nil, fmt.Errorf("plugin %q is of unknown type %v", resp.GetName(), resp.GetType())
	}
	return out, nil
}

// ConfigSchema implements BasePlugin.
func (c *Client) ConfigSchema() (*hclspec.Spec, error) {
	resp, err := c.Client.ConfigSchema(c.DoneCtx, &pb.ConfigSchemaRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetSpec(), nil
}

// SetConfig implements BasePlugin.
func (c *Client) SetConfig(cfg *Config) error {
	req := &pb.SetConfigRequest{MsgpackConfig: cfg.PluginConfig, PluginApiVersion: cfg.ApiVersion}
	if a := cfg.AgentConfig; a != nil && a.Driver != nil {
		req.NomadConfig = &pb.NomadConfig{Driver: &pb.NomadDriverConfig{
			ClientMinPort: uint32(a.Driver.ClientMinPort), ClientMaxPort: uint32(a.Driver.ClientMaxPort)}}
	}
	_, err := c.Client.SetConfig(c.DoneCtx, req)
	return err
}
