package devicefn

import (
	"errors"
	"fmt"
	"strconv"
)

// Attr is one device attribute value in the shape Nomad carries it (the
// plugin SDK's structs.Attribute, the API's api.Attribute): exactly one of
// Int, Float, String and Bool is set, and Unit may qualify a number.
//
// devicefn has its own copy so that the scheduler's placement core decodes
// device groups without linking Nomad's plugin SDK. Package plugin converts
// it to the SDK's type for the fingerprint; package scheduler/nomadattr
// converts the attributes Nomad's API returns into it. Both conversions copy
// every field, so Attributes and DecodeGroup stay exact inverses through
// Nomad.
type Attr struct {
	Int    *int64
	Float  *float64
	String *string
	Bool   *bool
	Unit   string
}

// UnitMiB is the unit of the memory attributes (Nomad's structs.UnitMiB).
const UnitMiB = "MiB"

// IntAttr is an integer attribute with an optional unit.
func IntAttr(v int64, unit string) Attr { return Attr{Int: &v, Unit: unit} }

// StringAttr is a string attribute.
func StringAttr(v string) Attr { return Attr{String: &v} }

// GetInt returns the integer value, if the attribute is an integer.
func (a Attr) GetInt() (int64, bool) {
	if a.Int == nil {
		return 0, false
	}
	return *a.Int, true
}

// GetString returns the string value, if the attribute is a string.
func (a Attr) GetString() (string, bool) {
	if a.String == nil {
		return "", false
	}
	return *a.String, true
}

// Validate checks that exactly one value is set and that only a number
// has a unit.
func (a Attr) Validate() error {
	set := 0
	for _, isSet := range []bool{a.Int != nil, a.Float != nil, a.String != nil, a.Bool != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("attribute %s: want exactly one value, got %d", a.GoString(), set)
	}
	if a.Unit != "" && a.Int == nil && a.Float == nil {
		return errors.New("attribute " + a.GoString() + ": only a number can have a unit")
	}
	return nil
}

// GoString describes the value and its type, for error messages.
func (a Attr) GoString() string {
	var s string
	switch {
	case a.Int != nil:
		s = "integer " + strconv.FormatInt(*a.Int, 10)
	case a.Float != nil:
		s = "float " + strconv.FormatFloat(*a.Float, 'g', -1, 64)
	case a.String != nil:
		s = "string " + strconv.Quote(*a.String)
	case a.Bool != nil:
		s = "bool " + strconv.FormatBool(*a.Bool)
	default:
		s = "no value"
	}
	if a.Unit != "" {
		s += " " + a.Unit
	}
	return s
}
