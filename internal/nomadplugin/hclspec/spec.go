package hclspec

import "github.com/gpushare/gpushare/internal/nomadplugin/pb"

// Spec is one node of a config schema.
type Spec = pb.Spec

// NewObject is an object with one attribute per entry; an Attr or Block
// without a name takes the entry's key.
func NewObject(attrs map[string]*Spec) *Spec {
	return &Spec{Block: &pb.Spec_Object{Object: &pb.Object{Attributes: attrs}}}
}

// NewAttr reads the attribute name, of the HCL type expression attrType
// ("string", "number", "bool", "list(string)", ...).
func NewAttr(name, attrType string, required bool) *Spec {
	return &Spec{Block: &pb.Spec_Attr{Attr: &pb.Attr{Name: name, Type: attrType, Required: required}}}
}

// NewBlock applies nested to the body of the block name, present at most
// once (exactly once when required).
func NewBlock(name string, required bool, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockValue{BlockValue: &pb.Block{Name: name, Required: required, Nested: nested}}}
}

// NewBlockAttrs is a map of elementType from the attributes of the block
// name.
func NewBlockAttrs(name, elementType string, required bool) *Spec {
	return &Spec{Block: &pb.Spec_BlockAttrs{BlockAttrs: &pb.BlockAttrs{Name: name, Type: elementType, Required: required}}}
}

// NewBlockList is a list with one element per block name, each decoded
// with nested.
func NewBlockList(name string, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockList{BlockList: &pb.BlockList{Name: name, Nested: nested}}}
}

// NewBlockSet is NewBlockList's unordered form.
func NewBlockSet(name string, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockSet{BlockSet: &pb.BlockSet{Name: name, Nested: nested}}}
}

// NewBlockMap is a map keyed by the labels of the blocks name.
func NewBlockMap(name string, labels []string, nested *Spec) *Spec {
	return &Spec{Block: &pb.Spec_BlockMap{BlockMap: &pb.BlockMap{Name: name, Labels: labels, Nested: nested}}}
}

// NewLiteral is the constant value, an HCL expression ("true", `"mps"`,
// "[]", `{ a = 1 }`).
func NewLiteral(value string) *Spec {
	return &Spec{Block: &pb.Spec_Literal{Literal: &pb.Literal{Value: value}}}
}

// NewDefault is primary, or defaultValue when primary is null (absent).
func NewDefault(primary, defaultValue *Spec) *Spec {
	return &Spec{Block: &pb.Spec_Default{Default: &pb.Default{Primary: primary, Default: defaultValue}}}
}

// NewArray is a tuple with one element per spec.
func NewArray(values []*Spec) *Spec {
	return &Spec{Block: &pb.Spec_Array{Array: &pb.Array{Values: values}}}
}
