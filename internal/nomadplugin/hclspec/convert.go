package hclspec

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpushare/gpushare/internal/nomadplugin/pb"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/gocty"
	"github.com/zclconf/go-cty/cty/msgpack"
)

// ErrSpec is wrapped by every error about a schema itself (as opposed to
// a config that does not fit it).
var ErrSpec = errors.New("invalid config schema")

// Convert returns the hcldec spec that s describes, as a Nomad client
// builds it to decode the plugin's config block. Literals are evaluated
// without functions or variables.
func Convert(s *Spec) (hcldec.Spec, error) {
	return convert(s, "", "config")
}

// ImpliedType is the cty type of every value s decodes to: the type the
// msgpack config is unmarshalled against.
func ImpliedType(s *Spec) (cty.Type, error) {
	d, err := Convert(s)
	if err != nil {
		return cty.NilType, err
	}
	return hcldec.ImpliedType(d), nil
}

func convert(s *Spec, impliedName, path string) (hcldec.Spec, error) {
	named := func(kind, name string) (string, error) {
		if name == "" {
			name = impliedName
		}
		if name == "" {
			return "", fmt.Errorf("%w: %s: %s has no name and is not an attribute of an object", ErrSpec, path, kind)
		}
		return name, nil
	}
	nested := func(kind string, n *pb.Spec) (hcldec.Spec, error) {
		if n == nil {
			return nil, fmt.Errorf("%w: %s: %s has no nested spec", ErrSpec, path, kind)
		}
		return convert(n, "", path+"."+kind)
	}
	switch b := s.GetBlock().(type) {
	case *pb.Spec_Object:
		out := hcldec.ObjectSpec{}
		keys := make([]string, 0, len(b.Object.GetAttributes()))
		for k := range b.Object.GetAttributes() {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the first error is always the same one
		for _, k := range keys {
			c, err := convert(b.Object.GetAttributes()[k], k, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case *pb.Spec_Array:
		out := hcldec.TupleSpec{}
		for i, v := range b.Array.GetValues() {
			c, err := convert(v, "", fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	case *pb.Spec_Attr:
		name, err := named("attr", b.Attr.GetName())
		if err != nil {
			return nil, err
		}
		ty, err := parseType(b.Attr.GetType(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.AttrSpec{Name: name, Type: ty, Required: b.Attr.GetRequired()}, nil
	case *pb.Spec_BlockValue:
		name, err := named("block", b.BlockValue.GetName())
		if err != nil {
			return nil, err
		}
		n, err := nested("block", b.BlockValue.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSpec{TypeName: name, Required: b.BlockValue.GetRequired(), Nested: n}, nil
	case *pb.Spec_BlockAttrs:
		name, err := named("block_attrs", b.BlockAttrs.GetName())
		if err != nil {
			return nil, err
		}
		ty, err := parseType(b.BlockAttrs.GetType(), path)
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockAttrsSpec{TypeName: name, ElementType: ty, Required: b.BlockAttrs.GetRequired()}, nil
	case *pb.Spec_BlockList:
		name, err := named("block_list", b.BlockList.GetName())
		if err != nil {
			return nil, err
		}
		n, err := nested("block_list", b.BlockList.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockListSpec{TypeName: name, Nested: n,
			MinItems: int(b.BlockList.GetMinItems()), MaxItems: int(b.BlockList.GetMaxItems())}, nil
	case *pb.Spec_BlockSet:
		name, err := named("block_set", b.BlockSet.GetName())
		if err != nil {
			return nil, err
		}
		n, err := nested("block_set", b.BlockSet.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockSetSpec{TypeName: name, Nested: n,
			MinItems: int(b.BlockSet.GetMinItems()), MaxItems: int(b.BlockSet.GetMaxItems())}, nil
	case *pb.Spec_BlockMap:
		name, err := named("block_map", b.BlockMap.GetName())
		if err != nil {
			return nil, err
		}
		if len(b.BlockMap.GetLabels()) == 0 {
			return nil, fmt.Errorf("%w: %s: block_map %q has no labels", ErrSpec, path, name)
		}
		n, err := nested("block_map", b.BlockMap.GetNested())
		if err != nil {
			return nil, err
		}
		return &hcldec.BlockMapSpec{TypeName: name, LabelNames: b.BlockMap.GetLabels(), Nested: n}, nil
	case *pb.Spec_Default:
		p, err := nested("default", b.Default.GetPrimary())
		if err != nil {
			return nil, err
		}
		d, err := nested("default", b.Default.GetDefault())
		if err != nil {
			return nil, err
		}
		return &hcldec.DefaultSpec{Primary: p, Default: d}, nil
	case *pb.Spec_Literal:
		expr, diags := hclsyntax.ParseExpression([]byte(b.Literal.GetValue()), path, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("%w: %s: literal %q: %s", ErrSpec, path, b.Literal.GetValue(), diags.Error())
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("%w: %s: literal %q: %s", ErrSpec, path, b.Literal.GetValue(), diags.Error())
		}
		return &hcldec.LiteralSpec{Value: v}, nil
	default:
		return nil, fmt.Errorf("%w: %s: spec of unknown kind %T", ErrSpec, path, s.GetBlock())
	}
}

func parseType(src, path string) (cty.Type, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(src), path, hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("%w: %s: type %q: %s", ErrSpec, path, src, diags.Error())
	}
	ty, diags := typeexpr.TypeConstraint(expr)
	if diags.HasErrors() {
		return cty.NilType, fmt.Errorf("%w: %s: type %q: %s", ErrSpec, path, src, diags.Error())
	}
	return ty, nil
}

// EncodeHCL decodes src, the body of a plugin's config block, against s
// with its defaults and returns the msgpack that a Nomad client hands the
// plugin's SetConfig: cty's msgpack encoding of the decoded value, with
// the value's own type.
func EncodeHCL(s *Spec, src []byte, filename string) ([]byte, error) {
	d, err := Convert(s)
	if err != nil {
		return nil, err
	}
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %s", filename, diags.Error())
	}
	val, diags := hcldec.Decode(f.Body, d, nil)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %s", filename, diags.Error())
	}
	return msgpack.Marshal(val, val.Type())
}

// Encode is the msgpack of in, a Go value with `cty` field tags, as the
// type s implies: what SetConfig would receive for a config decoding to in.
func Encode(s *Spec, in any) ([]byte, error) {
	ty, err := ImpliedType(s)
	if err != nil {
		return nil, err
	}
	val, err := gocty.ToCtyValue(in, ty)
	if err != nil {
		return nil, fmt.Errorf("encoding %T as the config schema's type: %w", in, err)
	}
	return msgpack.Marshal(val, ty)
}

// Decode unmarshals data, the msgpack config SetConfig received, against
// the type s implies, into out, a pointer to a struct whose fields carry
// `cty` tags named after the schema's attributes.
func Decode(s *Spec, data []byte, out any) error {
	ty, err := ImpliedType(s)
	if err != nil {
		return err
	}
	val, err := msgpack.Unmarshal(data, ty)
	if err != nil {
		return fmt.Errorf("config does not fit the plugin's schema: %s", describe(err))
	}
	if err := gocty.FromCtyValue(val, out); err != nil {
		return fmt.Errorf("config does not fit the plugin's schema: %s", describe(err))
	}
	return nil
}

// describe names the attribute a cty error is about ("mps.pipe_directory:
// a string is required").
func describe(err error) string {
	var pe cty.PathError
	if !errors.As(err, &pe) || len(pe.Path) == 0 {
		return err.Error()
	}
	name := ""
	for _, step := range pe.Path {
		switch s := step.(type) {
		case cty.GetAttrStep:
			name += "." + s.Name
		case cty.IndexStep:
			if s.Key.Type() == cty.String {
				name += "." + s.Key.AsString()
			} else if s.Key.Type() == cty.Number {
				name += "[" + s.Key.AsBigFloat().String() + "]"
			}
		}
	}
	if name == "" {
		return err.Error()
	}
	return name[1:] + ": " + err.Error()
}
