// Package device is Nomad's device plugin protocol: the DevicePlugin
// interface a device plugin implements (Fingerprint, Reserve, Stats, and
// base.BasePlugin), the values it returns, and their gRPC server over the
// generated code in package pb. The names mirror Nomad's plugins/device.
package device
