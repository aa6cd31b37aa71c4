package nomadattr

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/hashicorp/nomad/api"
)

// FromAPI converts the attributes Nomad's API returns for a device group
// into devicefn's form. Nil entries are left out (devicefn then reports
// them missing); every field of the others is copied.
func FromAPI(in map[string]*api.Attribute) map[string]devicefn.Attr {
	out := make(map[string]devicefn.Attr, len(in))
	for k, a := range in {
		if a != nil {
			out[k] = devicefn.Attr{Int: a.IntVal, Float: a.FloatVal, String: a.StringVal, Bool: a.BoolVal, Unit: a.Unit}
		}
	}
	return out
}

// ToAPI converts devicefn attributes into Nomad's API type, as Nomad
// returns the plugin's fingerprint; FromAPI(ToAPI(a)) equals a.
func ToAPI(in map[string]devicefn.Attr) map[string]*api.Attribute {
	out := make(map[string]*api.Attribute, len(in))
	for k, a := range in {
		out[k] = &api.Attribute{IntVal: a.Int, FloatVal: a.Float, StringVal: a.String, BoolVal: a.Bool, Unit: a.Unit}
	}
	return out
}

// DecodeGroup decodes the gpushare device group d of a node, as
// devicefn.DecodeGroup does for the plugin's attributes.
func DecodeGroup(d *api.NodeDeviceResource) (*devicefn.Group, error) {
	return devicefn.DecodeGroup(d.Name, FromAPI(d.Attributes))
}

// DecodeMIGGroup decodes a gpushare-mig device group d of a node, as
// devicefn.DecodeMIGGroup does for the plugin's attributes.
func DecodeMIGGroup(d *api.NodeDeviceResource) (*devicefn.MIGGroup, error) {
	return devicefn.DecodeMIGGroup(d.Name, FromAPI(d.Attributes))
}

// Device is the device group g as Nomad's API returns a node's plugin
// fingerprint: nvidia/gpushare/<model>, its attributes and every share of
// its GPUs (of a shared MIG instance, the instance's), healthy. Tests and
// tools that build nodes use it; DecodeGroup(Device(g)) equals g.
func Device(g *devicefn.Group) *api.NodeDeviceResource {
	d := &api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: g.Model, Attributes: ToAPI(g.Attributes())}
	for _, gpu := range g.GPUs {
		for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
			d.Instances = append(d.Instances, &api.NodeDevice{ID: id, Healthy: true})
		}
	}
	return d
}

// MIGDevice is the group of whole MIG instances g as Nomad's API returns
// it: nvidia/gpushare-mig/<profile>, one healthy instance per MIG device.
func MIGDevice(g *devicefn.MIGGroup) *api.NodeDeviceResource {
	d := &api.NodeDeviceResource{Vendor: devicefn.Vendor, Type: devicefn.MIGDeviceType, Name: g.Profile, Attributes: ToAPI(g.Attributes())}
	for _, inst := range g.Instances {
		d.Instances = append(d.Instances, &api.NodeDevice{ID: inst.UUID, Healthy: true})
	}
	return d
}
