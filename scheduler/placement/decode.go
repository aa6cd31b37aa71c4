package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// SnapshotSpec is the JSON form of a snapshot for the simulator and tests:
// plain node descriptions and the allocations running on them.
type SnapshotSpec struct {
	Nodes  []NodeSpec `json:"nodes"`
	Allocs []Alloc    `json:"allocs,omitempty"`
	// DefaultMaxSlowdown overrides the production bound (0 keeps 10%).
	DefaultMaxSlowdown float64 `json:"default_max_slowdown,omitempty"`
}

// ErrDecode is wrapped by decoding errors.
var ErrDecode = errors.New("cannot decode")

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// DecodeSnapshot builds a snapshot from its JSON form (SnapshotSpec).
// Unknown fields are errors.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	var spec SnapshotSpec
	if err := strictJSON(data, &spec); err != nil {
		return nil, fmt.Errorf("%w snapshot: %v", ErrDecode, err)
	}
	return spec.Build()
}

// Build turns the description into a snapshot.
func (spec *SnapshotSpec) Build() (*Snapshot, error) {
	s := NewSnapshot()
	if spec.DefaultMaxSlowdown != 0 {
		if !(spec.DefaultMaxSlowdown > 0 && spec.DefaultMaxSlowdown < 1) {
			return nil, fmt.Errorf("%w snapshot: default_max_slowdown %v must be within 0..1", ErrDecode, spec.DefaultMaxSlowdown)
		}
		s.DefaultMaxSlowdown = spec.DefaultMaxSlowdown
	}
	for i, ns := range spec.Nodes {
		n, err := NodeFromSpec(ns)
		if err != nil {
			return nil, fmt.Errorf("%w snapshot: node %d: %w", ErrDecode, i, err)
		}
		if err := s.AddNode(n); err != nil {
			return nil, fmt.Errorf("%w snapshot: node %d: %w", ErrDecode, i, err)
		}
	}
	for i, a := range spec.Allocs {
		switch a.Class {
		case ClassNormal, ClassProduction, ClassOpportunistic:
		default:
			return nil, fmt.Errorf("%w snapshot: allocation %d: class %q must be %q or %q", ErrDecode, i, a.Class, ClassProduction, ClassOpportunistic)
		}
		if err := a.Profile.Validate(); err != nil {
			return nil, fmt.Errorf("%w snapshot: allocation %d: %w", ErrDecode, i, err)
		}
		if !(a.MaxSlowdown >= 0 && a.MaxSlowdown < 1) {
			return nil, fmt.Errorf("%w snapshot: allocation %d: max_slowdown %v must be within 0..1", ErrDecode, i, a.MaxSlowdown)
		}
		if err := s.AddAlloc(a); err != nil {
			return nil, fmt.Errorf("%w snapshot: allocation %d: %w", ErrDecode, i, err)
		}
	}
	return s, nil
}

// DecodeRequest reads a request from JSON and validates it. A missing
// count means 1.
func DecodeRequest(data []byte) (Request, error) {
	r := Request{Count: 1}
	if err := strictJSON(data, &r); err != nil {
		return Request{}, fmt.Errorf("%w request: %v", ErrDecode, err)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}
