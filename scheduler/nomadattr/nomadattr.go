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
