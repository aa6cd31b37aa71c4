package feasible

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestParseValue mirrors ParseAttribute (plugins/shared/structs): numbers
// with a known unit suffix, booleans, and strings otherwise.
func TestParseValue(t *testing.T) {
	cases := []struct {
		in   string
		want value
	}{
		{"12", value{hasInt: true, i: 12}},
		{"80 GiB", value{hasInt: true, i: 80, unit: "GiB"}},
		{"1.5GHz", value{hasFloat: true, f: 1.5, unit: "GHz"}},
		{"300 MB/s", value{hasInt: true, i: 300, unit: "MB/s"}},
		{"true", value{hasBool: true, b: true}},
		{"12.4", value{hasFloat: true, f: 12.4}},
		{"H100 80GB", value{hasString: true, s: "H100 80GB"}},
		{"nvidia", value{hasString: true, s: "nvidia"}},
		{"", value{hasString: true, s: ""}},
		{"5 parsecs", value{hasString: true, s: "5 parsecs"}},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			must.Eq(t, tc.want, parseValue(tc.in))
		})
	}
}

// TestDeviceOperators mirrors checkAttributeConstraint and
// Attribute.Compare on a device group's attributes.
func TestDeviceOperators(t *testing.T) {
	d := gpuNode().NodeResources.Devices[0]
	d.Attributes["power"] = &api.Attribute{IntVal: ptr(int64(700)), Unit: "W"}
	d.Attributes["clock"] = &api.Attribute{FloatVal: ptr(1.98), Unit: "GHz"}
	d.Attributes["mig"] = &api.Attribute{BoolVal: ptr(false)}
	d.Attributes["nil"] = nil
	cases := []struct {
		name     string
		l, op, r string
		want     bool
	}{
		{"model", "${device.model}", "=", "NVIDIA H100 80GB HBM3", true},
		{"model regexp", "${device.model}", "regexp", "H100", true},
		{"vendor", "${device.vendor}", "==", "nvidia", true},
		{"type", "${device.type}", "is", "gpushare", true},
		{"memory in other units", "${device.attr.memory}", ">", "79 GiB", true},
		{"memory equal across units", "${device.attr.memory}", "=", "81559 MiB", true},
		{"memory not comparable with a plain number", "${device.attr.memory}", ">", "1", false},
		{"memory vs watts never compares", "${device.attr.memory}", "!=", "5 W", false},
		{"watts vs milliwatts: integers divide", "${device.attr.power}", "=", "700001 mW", true},
		{"watts vs kilowatts: 0.7 is below 7/10 in binary", "${device.attr.power}", "<=", "0.7 kW", false},
		{"watts vs kilowatts", "${device.attr.power}", "<=", "0.75 kW", true},
		{"float GHz vs MHz", "${device.attr.clock}", ">", "1900 MHz", true},
		{"int vs float", "${device.attr.gpus}", ">=", "7.5", true},
		{"string vs number never compares", "${device.attr.sharing}", "=", "1", false},
		{"bool", "${device.attr.mig}", "=", "false", true},
		{"bool order is not an order", "${device.attr.mig}", "<", "true", false},
		{"not equal one side missing", "${device.attr.nope}", "!=", "x", true},
		{"not equal both missing", "${device.attr.nope}", "!=", "${device.attr.none}", false},
		{"equal missing", "${device.attr.nope}", "=", "x", false},
		{"nil attribute is set but compares with nothing", "${device.attr.nil}", "=", "x", false},
		{"nil attribute is set", "${device.attr.nil}", "is_set", "", true},
		{"is_not_set", "${device.attr.nope}", "is_not_set", "", true},
		{"version on a string", "${device.attr.cuda_version}", "version", ">= 12.2", true},
		{"version with a numeric right side fails", "${device.attr.gpus}", "version", "8", false},
		{"version on an int", "${device.attr.gpus}", "version", ">= 8", true},
		{"semver", "${device.attr.compute_capability}", "semver", ">= 8.0", true},
		{"set_contains", "${device.attr.sharing}", "set_contains", "mps", true},
		{"set_contains_any", "${device.attr.sharing}", "set_contains_any", "timeslice,exclusive", false},
		{"ids", "${device.ids}", "set_contains_any", "GPU-a:0", true},
		{"unknown target", "${device.attrs.x}", "is_set", "", false},
		{"unknown operator", "${device.model}", "like", "H100", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := compileDevConstraint(&api.Constraint{LTarget: tc.l, Operand: tc.op, RTarget: tc.r})
			must.Eq(t, tc.want, k.holds(d))
		})
	}
}
