package structs

import (
	"errors"
	"fmt"

	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Units used by gpushare's attributes and statistics.
const (
	UnitMiB = "MiB"
	UnitMB  = "MB"
)

// units are the units Nomad accepts on an attribute: Nomad's client
// refuses a device group with an attribute in any other unit.
var units = map[string]bool{
	"KiB": true, "MiB": true, "GiB": true, "TiB": true, "PiB": true, "EiB": true,
	"kB": true, "KB": true, "MB": true, "GB": true, "TB": true, "PB": true, "EB": true,
	"KiB/s": true, "MiB/s": true, "GiB/s": true, "TiB/s": true, "PiB/s": true, "EiB/s": true,
	"kB/s": true, "KB/s": true, "MB/s": true, "GB/s": true, "TB/s": true, "PB/s": true, "EB/s": true,
	"MHz": true, "GHz": true,
	"mW": true, "W": true, "kW": true, "MW": true, "GW": true,
}

// Attribute is a device attribute: one of Int, Float, String and Bool,
// with an optional unit. Nomad reads the first set of Int, Float, String
// and Bool, in that order.
type Attribute struct {
	Float  *float64
	Int    *int64
	String *string
	Bool   *bool
	Unit   string
}

// Validate applies Nomad's rules for an attribute: exactly one value, and
// a unit only on a number and only one Nomad knows.
func (a *Attribute) Validate() error {
	if a.Unit != "" {
		if !units[a.Unit] {
			return fmt.Errorf("unrecognized unit %q", a.Unit)
		}
		if a.String != nil || a.Bool != nil {
			return errors.New("unit can not be specified on a boolean or string attribute")
		}
	}
	set := 0
	for _, isSet := range []bool{a.Float != nil, a.Int != nil, a.String != nil, a.Bool != nil} {
		if isSet {
			set++
		}
	}
	switch {
	case set == 0:
		return errors.New("no attribute value set")
	case set > 1:
		return errors.New("only one attribute value may be set")
	}
	return nil
}

// StatObject is a tree of statistics.
type StatObject struct {
	Nested     map[string]*StatObject
	Attributes map[string]*StatValue
}

// StatValue is one statistic: a numerator with an optional denominator
// (integer or float), or a string, or a bool.
type StatValue struct {
	FloatNumeratorVal   *float64
	FloatDenominatorVal *float64
	IntNumeratorVal     *int64
	IntDenominatorVal   *int64
	StringVal           *string
	BoolVal             *bool
	Unit                string
	Desc                string
}

// AttributeProto is the attribute as the protocol carries it.
func AttributeProto(in *Attribute) *pb.Attribute {
	if in == nil {
		return nil
	}
	out := &pb.Attribute{Unit: in.Unit}
	switch {
	case in.Int != nil:
		out.Value = &pb.Attribute_IntVal{IntVal: *in.Int}
	case in.Float != nil:
		out.Value = &pb.Attribute_FloatVal{FloatVal: *in.Float}
	case in.String != nil:
		out.Value = &pb.Attribute_StringVal{StringVal: *in.String}
	case in.Bool != nil:
		out.Value = &pb.Attribute_BoolVal{BoolVal: *in.Bool}
	}
	return out
}

// AttributeFromProto is the inverse of AttributeProto.
func AttributeFromProto(in *pb.Attribute) *Attribute {
	if in == nil {
		return nil
	}
	out := &Attribute{Unit: in.GetUnit()}
	switch v := in.GetValue().(type) {
	case *pb.Attribute_IntVal:
		out.Int = &v.IntVal
	case *pb.Attribute_FloatVal:
		out.Float = &v.FloatVal
	case *pb.Attribute_StringVal:
		out.String = &v.StringVal
	case *pb.Attribute_BoolVal:
		out.Bool = &v.BoolVal
	}
	return out
}

// AttributeMapProto converts a map of attributes.
func AttributeMapProto(in map[string]*Attribute) map[string]*pb.Attribute {
	if in == nil {
		return nil
	}
	out := make(map[string]*pb.Attribute, len(in))
	for k, a := range in {
		out[k] = AttributeProto(a)
	}
	return out
}

// AttributeMapFromProto is the inverse of AttributeMapProto.
func AttributeMapFromProto(in map[string]*pb.Attribute) map[string]*Attribute {
	if in == nil {
		return nil
	}
	out := make(map[string]*Attribute, len(in))
	for k, a := range in {
		out[k] = AttributeFromProto(a)
	}
	return out
}

// StatObjectProto is the statistics tree as the protocol carries it.
func StatObjectProto(in *StatObject) *pb.StatObject {
	if in == nil {
		return nil
	}
	out := &pb.StatObject{
		Nested:     make(map[string]*pb.StatObject, len(in.Nested)),
		Attributes: make(map[string]*pb.StatValue, len(in.Attributes)),
	}
	for k, v := range in.Nested {
		out.Nested[k] = StatObjectProto(v)
	}
	for k, v := range in.Attributes {
		out.Attributes[k] = StatValueProto(v)
	}
	return out
}

// StatObjectFromProto is the inverse of StatObjectProto.
func StatObjectFromProto(in *pb.StatObject) *StatObject {
	if in == nil {
		return nil
	}
	out := &StatObject{
		Nested:     make(map[string]*StatObject, len(in.GetNested())),
		Attributes: make(map[string]*StatValue, len(in.GetAttributes())),
	}
	for k, v := range in.GetNested() {
		out.Nested[k] = StatObjectFromProto(v)
	}
	for k, v := range in.GetAttributes() {
		out.Attributes[k] = StatValueFromProto(v)
	}
	return out
}

// StatValueProto is the statistic as the protocol carries it.
func StatValueProto(in *StatValue) *pb.StatValue {
	if in == nil {
		return nil
	}
	out := &pb.StatValue{Unit: in.Unit, Desc: in.Desc}
	if in.FloatNumeratorVal != nil {
		out.FloatNumeratorVal = wrapperspb.Double(*in.FloatNumeratorVal)
	}
	if in.FloatDenominatorVal != nil {
		out.FloatDenominatorVal = wrapperspb.Double(*in.FloatDenominatorVal)
	}
	if in.IntNumeratorVal != nil {
		out.IntNumeratorVal = wrapperspb.Int64(*in.IntNumeratorVal)
	}
	if in.IntDenominatorVal != nil {
		out.IntDenominatorVal = wrapperspb.Int64(*in.IntDenominatorVal)
	}
	if in.StringVal != nil {
		out.StringVal = wrapperspb.String(*in.StringVal)
	}
	if in.BoolVal != nil {
		out.BoolVal = wrapperspb.Bool(*in.BoolVal)
	}
	return out
}

// StatValueFromProto is the inverse of StatValueProto.
func StatValueFromProto(in *pb.StatValue) *StatValue {
	if in == nil {
		return nil
	}
	out := &StatValue{Unit: in.GetUnit(), Desc: in.GetDesc()}
	if v := in.GetFloatNumeratorVal(); v != nil {
		out.FloatNumeratorVal = &v.Value
	}
	if v := in.GetFloatDenominatorVal(); v != nil {
		out.FloatDenominatorVal = &v.Value
	}
	if v := in.GetIntNumeratorVal(); v != nil {
		out.IntNumeratorVal = &v.Value
	}
	if v := in.GetIntDenominatorVal(); v != nil {
		out.IntDenominatorVal = &v.Value
	}
	if v := in.GetStringVal(); v != nil {
		out.StringVal = &v.Value
	}
	if v := in.GetBoolVal(); v != nil {
		out.BoolVal = &v.Value
	}
	return out
}
