package hclspec

import (
	"errors"
	"testing"

	"github.com/shoenig/test/must"
	"github.com/zclconf/go-cty/cty"
)

var testSpec = NewObject(map[string]*Spec{
	"name":  NewDefault(NewAttr("name", "string", false), NewLiteral(`"x"`)),
	"count": NewAttr("count", "number", true),
	"tags":  NewDefault(NewAttr("tags", "list(string)", false), NewLiteral("[]")),
	"inner": NewDefault(
		NewBlock("inner", false, NewObject(map[string]*Spec{
			"on": NewDefault(NewAttr("on", "bool", false), NewLiteral("false")),
		})),
		NewLiteral("{ on = false }"),
	),
})

type inner struct {
	On bool `cty:"on"`
}

type testConfig struct {
	Name  string   `cty:"name"`
	Count int      `cty:"count"`
	Tags  []string `cty:"tags"`
	Inner inner    `cty:"inner"`
}

func TestImpliedType(t *testing.T) {
	ty, err := ImpliedType(testSpec)
	must.NoError(t, err)
	must.True(t, ty.Equals(cty.Object(map[string]cty.Type{
		"name": cty.String, "count": cty.Number, "tags": cty.List(cty.String),
		"inner": cty.Object(map[string]cty.Type{"on": cty.Bool}),
	})), must.Sprint(ty.FriendlyName()))
}

func TestRoundTrip(t *testing.T) {
	b, err := EncodeHCL(testSpec, []byte("count = 3\ntags = [\"a\"]\ninner {\n  on = true\n}\n"), "t.hcl")
	must.NoError(t, err)
	var got testConfig
	must.NoError(t, Decode(testSpec, b, &got))
	must.Eq(t, testConfig{Name: "x", Count: 3, Tags: []string{"a"}, Inner: inner{On: true}}, got)

	// defaults, and Encode as the inverse of Decode
	b, err = EncodeHCL(testSpec, []byte("count = 1"), "t.hcl")
	must.NoError(t, err)
	got = testConfig{}
	must.NoError(t, Decode(testSpec, b, &got))
	must.Eq(t, testConfig{Name: "x", Count: 1, Tags: []string{}}, got)
	again, err := Encode(testSpec, got)
	must.NoError(t, err)
	var back testConfig
	must.NoError(t, Decode(testSpec, again, &back))
	must.Eq(t, got, back)
}

func TestErrorsNameTheProblem(t *testing.T) {
	_, err := EncodeHCL(testSpec, []byte(""), "t.hcl")
	must.ErrorContains(t, err, `Missing required argument; The argument "count" is required`)
	_, err = EncodeHCL(testSpec, []byte("count = \"many\""), "t.hcl")
	must.ErrorContains(t, err, "t.hcl:1,9-15")

	b, err := EncodeHCL(testSpec, []byte("count = 1.5"), "t.hcl")
	must.NoError(t, err)
	var got testConfig
	err = Decode(testSpec, b, &got)
	must.ErrorContains(t, err, "count: ")
	must.ErrorContains(t, err, "config does not fit the plugin's schema")

	err = Decode(testSpec, []byte{0xc1}, &got)
	must.ErrorContains(t, err, "config does not fit the plugin's schema")

	for name, bad := range map[string]*Spec{
		"no name":      NewDefault(NewAttr("", "string", false), NewLiteral(`""`)),
		"bad type":     NewObject(map[string]*Spec{"a": NewAttr("a", "strang", false)}),
		"bad literal":  NewObject(map[string]*Spec{"a": NewLiteral("{")}),
		"no nested":    NewObject(map[string]*Spec{"a": NewBlock("a", false, nil)}),
		"no labels":    NewObject(map[string]*Spec{"a": NewBlockMap("a", nil, NewAttr("b", "string", false))}),
		"empty spec":   {},
		"literal func": NewObject(map[string]*Spec{"a": NewLiteral(`upper("x")`)}),
	} {
		_, err := Convert(bad)
		must.True(t, errors.Is(err, ErrSpec), must.Sprintf("%s: %v", name, err))
	}
}

// Every spec kind converts to the hcldec spec Nomad builds from it.
func TestConvertEveryKind(t *testing.T) {
	s := NewObject(map[string]*Spec{
		"arr":   NewArray([]*Spec{NewAttr("e", "bool", false), NewLiteral("true")}),
		"attrs": NewBlockAttrs("attrs", "string", false),
		"list":  NewBlockList("list", NewObject(map[string]*Spec{"h": NewAttr("h", "string", false)})),
		"set":   NewBlockSet("set", NewObject(map[string]*Spec{"h": NewAttr("h", "string", false)})),
		"map":   NewBlockMap("map", []string{"k"}, NewObject(map[string]*Spec{"h": NewAttr("h", "string", false)})),
	})
	b, err := EncodeHCL(s, []byte("e = false\nattrs {\n  a = \"1\"\n}\nlist {\n  h = \"x\"\n}\nlist {\n  h = \"y\"\n}\nset {\n  h = \"z\"\n}\nmap \"k1\" {\n  h = \"w\"\n}\n"), "t.hcl")
	must.NoError(t, err)
	type h struct {
		H string `cty:"h"`
	}
	var got struct {
		Arr   cty.Value         `cty:"arr"`
		Attrs map[string]string `cty:"attrs"`
		List  []h               `cty:"list"`
		Set   []h               `cty:"set"`
		Map   map[string]h      `cty:"map"`
	}
	must.NoError(t, Decode(s, b, &got))
	must.Eq(t, []h{{"x"}, {"y"}}, got.List)
	must.Eq(t, []h{{"z"}}, got.Set)
	must.Eq(t, map[string]h{"k1": {"w"}}, got.Map)
	must.Eq(t, map[string]string{"a": "1"}, got.Attrs)
	must.True(t, got.Arr.Equals(cty.TupleVal([]cty.Value{cty.False, cty.True})).True(), must.Sprint(got.Arr.GoString()))
}

// FuzzDecode: whatever bytes SetConfig receives, Decode returns an error
// or a config, never panics.
func FuzzDecode(f *testing.F) {
	b, err := EncodeHCL(testSpec, []byte("count = 3"), "t.hcl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got testConfig
		_ = Decode(testSpec, data, &got)
	})
}
