package placement

import (
	"encoding/json"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// snapJSON is a DGX-1 V100 and a 4-GPU PCIe server, wired as the real
// ones (package topologies), with one allocation.
var snapJSON = `{
  "nodes": [
    {"id": "dgx", "rack": "r1", "cpu": 80000, "memory_mib": 524288, "gpus": 8, "model": "V100", ` + wiring(topologies.DGX1V100) + `},
    {"id": "pcie", "cpu": 40000, "memory_mib": 262144, "gpus": 4, ` + wiring(topologies.PCIe2Socket) + `, "shares_per_gpu": 10}
  ],
  "allocs": [
    {"id": "a1", "node": "dgx", "shares": ["GPU-dgx-0:0", "GPU-dgx-0:1"], "resources": {"cpu": 1000, "memory_mib": 1024},
     "class": "production", "profile": {"sm_util": 0.5, "mem_bw": 0.3}}
  ]
}`

// wiring is the "links" and "numa" fields of a node spec for a real server.
func wiring(name string) string {
	l, err := json.Marshal(links(name))
	if err != nil {
		panic(err)
	}
	n, err := json.Marshal(numa(name))
	if err != nil {
		panic(err)
	}
	return `"links": ` + string(l) + `, "numa": ` + string(n)
}

func TestDecodeSnapshot(t *testing.T) {
	s, err := DecodeSnapshot([]byte(snapJSON))
	must.NoError(t, err)
	must.Eq(t, 2, len(s.Nodes()))
	must.Eq(t, 1, len(s.Allocs()))
	n, ok := s.Node("dgx")
	must.True(t, ok)
	must.Eq(t, "r1", n.Rack)
	must.Eq(t, 98, n.GPUs[0].Free())
	must.Eq(t, Resources{CPU: 79000, MemoryMiB: 523264}, n.Free())
	must.NoError(t, s.Check())

	bad := []string{
		`{"nodes": [{"id": "x", "gpus": 2, ` + wiring(topologies.DGX1V100) + `}]}`,
		`{"nodes": [{"id": "x", "gpus": 2, "links": [["X", "NV1"], ["NV2", "X"]]}]}`,
		`{"nodes": [{"id": "x", "gpus": 2, "links": [["X", "QPI"], ["QPI", "X"]]}]}`,
		`{"nodes": [{"id": "x", "gpus": 2, "numa": [0]}]}`,
		`{"nodes": [{"id": "x", "topology": "dgx1-v100"}]}`,
		`{"nodes": [{"id": "x", "gpus": 1}], "allocs": [{"id": "a", "node": "x", "shares": ["GPU-x-0:100"]}]}`,
		`{"nodes": [{"id": "x", "gpus": 1}], "allocs": [{"id": "a", "node": "x", "shares": ["GPU-x-0:1", "GPU-x-0:1"]}]}`,
		`{"nodes": [{"id": "x", "gpus": 1}, {"id": "x"}]}`,
		`{"nodes": [], "surprise": 1}`,
		`{"nodes": []} {}`,
	}
	for _, b := range bad {
		_, err := DecodeSnapshot([]byte(b))
		must.Error(t, err, must.Sprint(b))
	}
}

func TestDecodeRequest(t *testing.T) {
	r, err := DecodeRequest([]byte(`{"id": "j", "shares": 25, "models": ["V100"], "class": "production", "profile": {"sm_util": 0.4, "mem_bw": 0.2}}`))
	must.NoError(t, err)
	must.Eq(t, 1, r.Count)
	must.Eq(t, ClassProduction, r.Class)
	for _, b := range []string{`{"count": -1}`, `{"class": "vip"}`, `{"profile": {"sm_util": 2}}`, `{"shares": "x"}`, `{"bogus": 1}`} {
		_, err := DecodeRequest([]byte(b))
		must.Error(t, err, must.Sprint(b))
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(snapJSON))
	f.Add([]byte(`{"nodes": [{"id": "x", "gpus": 1}], "allocs": [{"id": "a", "node": "x", "shares": ["GPU-x-0:0"]}]}`))
	f.Add([]byte(`{"nodes": [{"id": "h", "gpus": 8, ` + wiring(topologies.HGXH100) + `, "shares_per_gpu": 1000}]}`))
	f.Add([]byte(`{"nodes": [{"id": "p", "gpus": 2, "links": [["X", "PIX"], ["PIX", "X"]], "numa": [0, 1]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatalf("decoded snapshot breaks an invariant: %v", err)
		}
		p, _ := New(PolicyGpushare, Options{})
		d := p.Decide(s, Request{ID: "f", Count: 2, Shares: 50})
		if d.Placed() {
			if err := s.Apply(d); err != nil {
				t.Fatalf("apply: %v", err)
			}
		}
		for _, a := range s.Allocs() {
			if _, err := s.Remove(a.ID); err != nil {
				t.Fatal(err)
			}
		}
		if !s.Empty() {
			t.Fatal("not empty after removing everything")
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"id": "j", "shares": 25}`))
	f.Add([]byte(`{"id": "g", "count": 3, "shares": 200, "resources": {"cpu": 100, "memory_mib": 64}, "avoid": ["a"]}`))
	f.Add([]byte(`{"id": "c", "shares": 0, "vc": "t", "class": "opportunistic", "max_slowdown": 0.2}`))
	s, err := DecodeSnapshot([]byte(snapJSON))
	if err != nil {
		f.Fatal(err)
	}
	p, _ := New(PolicyGpushare, Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err != nil {
			return
		}
		if r.Count > 64 {
			r.Count = 64
		}
		before := s.Version()
		d := p.Decide(s, r)
		if s.Version() != before || s.Check() != nil {
			t.Fatal("Decide changed the snapshot")
		}
		if !d.Placed() && (d.Refusal == nil || d.Refusal.Message == "") {
			t.Fatal("refusal without a reason")
		}
	})
}

// TestNodeFromGroupsRoundTrip builds a node the way the live service does:
// from the attributes the plugin writes, decoded by devicefn.
func TestNodeFromGroupsRoundTrip(t *testing.T) {
	topo := topologies.MustGet(topologies.DGX1V100)
	g := devicefn.Group{Model: "Tesla V100-SXM2-16GB", SharesPerGPU: 100, Sharing: devicefn.SharingMPS, MemoryMiB: 16384}
	for i := range topo.Links {
		g.GPUs = append(g.GPUs, devicefn.GroupGPU{UUID: "GPU-" + itoa(i), PCIBusID: "0000:0" + itoa(i) + ":00.0", NUMANode: topo.NUMA[i], Links: topo.Links[i]})
	}
	decoded, err := devicefn.DecodeGroup(g.Model, g.Attributes())
	must.NoError(t, err)
	n, err := NodeFromGroups("node-1", "dgx-1", Resources{CPU: 80000, MemoryMiB: 1 << 19}, map[string]string{"rack": "r7"}, []devicefn.Group{*decoded})
	must.NoError(t, err)
	must.Eq(t, "r7", n.Rack)
	s := NewSnapshot()
	must.NoError(t, s.AddNode(n))
	d := policy(t, PolicyGpushare, Options{}).Decide(s, Request{ID: "pair", Count: 1, Shares: 200})
	must.True(t, d.Placed())
	must.Eq(t, []string{"GPU-0", "GPU-3"}, d.Placements[0].GPUs)
	must.Eq(t, 200, len(d.Placements[0].Shares))

	_, err = NodeFromGroups("bad", "", Resources{}, nil, []devicefn.Group{{Model: "x", SharesPerGPU: 0}})
	must.ErrorIs(t, err, ErrBadNode)
}

func TestRemoveNode(t *testing.T) {
	s, err := DecodeSnapshot([]byte(snapJSON))
	must.NoError(t, err)
	p := policy(t, PolicyGpushare, Options{})
	place(t, s, p, Request{ID: "x", Shares: 300, Models: []string{"V100"}})
	lost, err := s.RemoveNode("dgx")
	must.NoError(t, err)
	must.Eq(t, 2, len(lost))
	must.Eq(t, 1, len(s.Nodes()))
	must.Eq(t, 0, len(s.Allocs()))
	_, err = s.RemoveNode("dgx")
	must.ErrorIs(t, err, ErrUnknown)
	// The policy notices and places on what is left.
	d := place(t, s, p, Request{ID: "y", Shares: 20})
	must.Eq(t, "pcie", d.Placements[0].Node)
	must.NoError(t, s.Check())
}
