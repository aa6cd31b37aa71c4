// Package nomadplugin serves a Nomad device plugin without Nomad's own
// code: Nomad's device plugin protocol (go-plugin's handshake and gRPC
// transport, the base and device services) implemented from its published
// protocol, the .proto files in pb written with Nomad's names and field
// numbers. Its subpackages mirror the names of Nomad's plugin SDK (base,
// device, structs, hclspec), so a plugin reads as one written against it.
// Nomad's plugin SDK is under the Business Source License since Nomad 1.7;
// this package is what keeps it out of gpushare's binaries.
package nomadplugin
