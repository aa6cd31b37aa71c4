package model

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// editAttrs edits device attributes by lines "key=<type><value>": type i
// an integer, u an integer in MiB, f a float, s a string, b a bool, n a
// nil attribute, - deletes the key.
func editAttrs(attrs map[string]*api.Attribute, edits string) {
	for line := range strings.SplitSeq(edits, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || v == "" {
			continue
		}
		typ, val := v[0], v[1:]
		i, _ := strconv.ParseInt(val, 10, 64)
		fl, _ := strconv.ParseFloat(val, 64)
		b := val == "1"
		switch typ {
		case 'i':
			attrs[k] = &api.Attribute{IntVal: &i}
		case 'u':
			attrs[k] = &api.Attribute{IntVal: &i, Unit: "MiB"}
		case 'f':
			attrs[k] = &api.Attribute{FloatVal: &fl}
		case 's':
			attrs[k] = &api.Attribute{StringVal: &val}
		case 'b':
			attrs[k] = &api.Attribute{BoolVal: &b}
		case 'n':
			attrs[k] = nil
		case '-':
			delete(attrs, k)
		}
	}
}

// FuzzNodeOf: a node as Nomad's API returns it (JSON), with its gpushare
// attributes edited arbitrarily: NodeOf never panics, refuses with an
// error that wraps ErrBadAttributes or placement.ErrBadNode, and a node
// it accepts has the GPUs its attributes list; the state then builds its
// snapshot without a panic.
func FuzzNodeOf(f *testing.F) {
	base, err := json.Marshal(pcieNode(&testing.T{}, "n1"))
	must.NoError(f, err)
	two := pcieNode(&testing.T{}, "n2")
	two.NodeResources.Devices = append(two.NodeResources.Devices, two.NodeResources.Devices[0],
		&api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: "Tesla T4"}, nil)
	two.ReservedResources = &api.NodeReservedResources{Cpu: api.NodeReservedCpuResources{CpuShares: 1 << 63}}
	twoJSON, err := json.Marshal(two)
	must.NoError(f, err)
	for _, s := range []struct {
		raw   string
		edits string
	}{
		{string(base), ""},
		{string(base), "gpus=i0"},
		{string(base), "gpus=i65\nshares_per_gpu=i1"},
		{string(base), "gpus=i9223372036854775807"},
		{string(base), "gpu1.uuid=sGPU-p1000000-0000-4000-8000-000000000000"},
		{string(base), "gpu0.uuid=s"},
		{string(base), "gpu0.links=sX,X,X,X"},
		{string(base), "gpu0.links=i7"},
		{string(base), "gpu0.numa_node=i-1\nmemory=u-1"},
		{string(base), "shares_per_gpu=n"},
		{string(base), "shares_per_gpu=-"},
		{string(twoJSON), ""},
		{`{"ID":"n","Status":"ready","SchedulingEligibility":"eligible"}`, ""},
		{`{"ID":"n","Status":"ready","SchedulingEligibility":"eligible","NodeResources":{"Devices":[null,{"Vendor":"nvidia","Type":"gpushare"}]}}`, ""},
		{`{"ID":"n","NodeResources":{"Cpu":{"CpuShares":-1}},"ReservedResources":{"Memory":{"MemoryMB":18446744073709551615}}}`, ""},
		{`null`, ""},
		{`{`, ""},
	} {
		f.Add([]byte(s.raw), s.edits)
	}
	f.Fuzz(func(t *testing.T, raw []byte, edits string) {
		var n *api.Node
		if err := json.Unmarshal(raw, &n); err != nil || n == nil {
			return
		}
		want := -1
		if n.NodeResources != nil {
			for _, d := range n.NodeResources.Devices {
				if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.DeviceType {
					if d.Attributes == nil {
						d.Attributes = map[string]*api.Attribute{}
					}
					editAttrs(d.Attributes, edits)
					break
				}
			}
		}
		node, err := NodeOf(n)
		if err != nil {
			if !errors.Is(err, devicefn.ErrBadAttributes) && !errors.Is(err, placement.ErrBadNode) {
				t.Fatalf("NodeOf: %q wraps neither ErrBadAttributes nor ErrBadNode", err)
			}
		} else {
			want = 0
			for _, d := range n.NodeResources.Devices {
				if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.DeviceType {
					if a := d.Attributes[devicefn.AttrGPUs]; a != nil && a.IntVal != nil {
						want += int(*a.IntVal)
					}
				}
			}
			if len(node.GPUs) != want {
				t.Fatalf("node with %d GPUs, its attributes list %d", len(node.GPUs), want)
			}
		}
		_ = UnhealthyGPUs(n)
		s := New()
		n.ID = "n1"
		s.PutNode(n)
		s.PutAlloc(shareAlloc("a1", "j", "n1", 0, 30))
		b := s.Snapshot(nil, nil)
		if err == nil && Usable(n) && len(b.Problems) > 0 && want > 0 {
			t.Logf("problems: %v", b.Problems)
		}
	})
}
