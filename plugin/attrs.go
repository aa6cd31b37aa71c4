package plugin

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
)

// sdkAttributes converts a device group's attributes into the plugin SDK's
// type for the fingerprint. Every field is copied, so what the scheduler
// reads back through Nomad's API decodes to the same group.
func sdkAttributes(in map[string]devicefn.Attr) map[string]*structs.Attribute {
	out := make(map[string]*structs.Attribute, len(in))
	for k, a := range in {
		out[k] = &structs.Attribute{Int: a.Int, Float: a.Float, String: a.String, Bool: a.Bool, Unit: a.Unit}
	}
	return out
}

// fromSDKAttributes is the inverse of sdkAttributes (nil entries are
// left out), for reading a fingerprint back.
func fromSDKAttributes(in map[string]*structs.Attribute) map[string]devicefn.Attr {
	out := make(map[string]devicefn.Attr, len(in))
	for k, a := range in {
		if a != nil {
			out[k] = devicefn.Attr{Int: a.Int, Float: a.Float, String: a.String, Bool: a.Bool, Unit: a.Unit}
		}
	}
	return out
}
