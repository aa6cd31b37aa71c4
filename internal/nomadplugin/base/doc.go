// Package base is the part of Nomad's plugin protocol every plugin serves:
// the go-plugin handshake, the BasePlugin interface (PluginInfo,
// ConfigSchema, SetConfig) and its gRPC server and client over the
// generated code in package pb. The names mirror Nomad's plugins/base.
package base
