// Package hclspec is the schema of a plugin's config block as Nomad's
// plugin protocol carries it (pb.Spec, a tree of hcldec specs), with the
// builders Nomad's plugin SDK offers (NewObject, NewAttr, NewDefault, ...)
// and the two ends of the config's trip: EncodeHCL does what a Nomad
// client does with the plugin block (decode it against the spec, defaults
// applied, and encode the cty value as msgpack) and Decode does what the
// plugin does with the bytes SetConfig receives (unmarshal them against the
// spec's type into a Go struct with `cty` field tags).
package hclspec
