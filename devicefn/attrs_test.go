package devicefn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// randomInventory builds a valid inventory of n GPUs with a random
// symmetric link matrix and up to two models.
func randomInventory(r *rand.Rand, n int) *Inventory {
	kinds := []Link{{Kind: LinkNVLink, NVLinks: 1 + r.IntN(18)}, {Kind: LinkPIX}, {Kind: LinkPXB}, {Kind: LinkPHB}, {Kind: LinkNODE}, {Kind: LinkSYS}}
	inv := &Inventory{DriverVersion: "550.54.15", CUDAVersion: "12.4", Links: make(Matrix, n)}
	for i := range n {
		inv.Links[i] = make([]Link, n)
	}
	for i := range n {
		inv.Links[i][i] = Link{Kind: LinkSelf}
		for j := i + 1; j < n; j++ {
			l := kinds[r.IntN(len(kinds))]
			inv.Links[i][j], inv.Links[j][i] = l, l
		}
		model := "NVIDIA H100 80GB HBM3"
		if r.IntN(4) == 0 {
			model = "Tesla V100-SXM2-16GB"
		}
		inv.GPUs = append(inv.GPUs, GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", r.Uint32(), i), Model: model,
			MemoryMiB: uint64(1024 + r.IntN(80000)), PCIBusID: fmt.Sprintf("00000000:%02X:00.0", i),
			NUMANode: r.IntN(3) - 1, ComputeCapability: "9.0", Minor: i,
		})
	}
	return inv
}

// TestAttributesRoundTrip is the property the scheduler relies on: whatever
// the plugin encodes, DecodeGroup gives back exactly.
func TestAttributesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		inv := randomInventory(r, 1+r.IntN(16))
		must.NoError(t, inv.Validate())
		shares := 1 + r.IntN(MaxSharesPerGPU)
		for _, g := range Groups(inv, shares, SharingMPS, nil) {
			attrs := g.Attributes()
			for k, a := range attrs {
				must.NoError(t, a.Validate(), must.Sprintf("attribute %s", k))
			}
			got, err := DecodeGroup(g.Model, attrs)
			must.NoError(t, err, must.Sprintf("trial %d", trial))
			must.Eq(t, g, *got, must.Sprintf("trial %d", trial))
		}
	}
}

func TestGroupsSplitByModel(t *testing.T) {
	x, nv, sys := Link{Kind: LinkSelf}, Link{Kind: LinkNVLink, NVLinks: 4}, Link{Kind: LinkSYS}
	inv := &Inventory{
		GPUs: []GPU{
			{Index: 0, UUID: "GPU-a", Model: "A", MemoryMiB: 100},
			{Index: 1, UUID: "GPU-b", Model: "B", MemoryMiB: 50},
			{Index: 2, UUID: "GPU-c", Model: "A", MemoryMiB: 90},
			{Index: 3, UUID: "GPU-d", Model: "A", MemoryMiB: 100, MIG: true},
		},
		Links: Matrix{{x, sys, nv, sys}, {sys, x, sys, sys}, {nv, sys, x, sys}, {sys, sys, sys, x}},
	}
	groups := Groups(inv, 10, SharingTimeslice, nil)
	must.SliceLen(t, 2, groups)
	must.Eq(t, "A", groups[0].Model)
	must.Eq(t, uint64(90), groups[0].MemoryMiB)
	must.Eq(t, uint64(9), groups[0].ShareMemoryMiB())
	must.Eq(t, Matrix{{x, nv}, {nv, x}}, groups[0].Links())
	must.Eq(t, "GPU-b", groups[1].GPUs[0].UUID)
	must.SliceLen(t, 1, Groups(inv, 10, SharingTimeslice, map[string]bool{"GPU-b": true}))
}

func TestDecodeGroupErrors(t *testing.T) {
	inv := randomInventory(rand.New(rand.NewPCG(3, 4)), 4)
	for i := range inv.GPUs {
		inv.GPUs[i].Model = "NVIDIA H100 80GB HBM3"
	}
	g := Groups(inv, 100, SharingMPS, nil)[0]
	cases := map[string]func(map[string]Attr){
		`attribute "gpus": missing`:                   func(a map[string]Attr) { delete(a, AttrGPUs) },
		`attribute "gpu1.links"`:                      func(a map[string]Attr) { a["gpu1.links"] = StringAttr("X,QPI") },
		`attribute "shares_per_gpu": want an integer`: func(a map[string]Attr) { a[AttrSharesPerGPU] = StringAttr("100") },
		`attribute "shares_per_gpu": 0 is outside`:    func(a map[string]Attr) { a[AttrSharesPerGPU] = IntAttr(0, "") },
		`link matrix`: func(a map[string]Attr) { a["gpu0.links"] = StringAttr("X") },
	}
	for want, mutate := range cases {
		t.Run(want, func(t *testing.T) {
			attrs := g.Attributes()
			mutate(attrs)
			_, err := DecodeGroup(g.Model, attrs)
			must.True(t, errors.Is(err, ErrBadAttributes))
			must.ErrorContains(t, err, want)
		})
	}
}

func BenchmarkDecodeGroup(b *testing.B) {
	g := Groups(randomInventory(rand.New(rand.NewPCG(5, 6)), 8), 100, SharingMPS, nil)[0]
	attrs := g.Attributes()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeGroup(g.Model, attrs); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAttrValidate(t *testing.T) {
	f, b := 1.5, true
	must.NoError(t, IntAttr(5, UnitMiB).Validate())
	must.NoError(t, StringAttr("x").Validate())
	must.NoError(t, Attr{Float: &f, Unit: UnitMiB}.Validate())
	must.ErrorContains(t, Attr{}.Validate(), "want exactly one value, got 0")
	must.ErrorContains(t, Attr{Int: IntAttr(1, "").Int, Bool: &b}.Validate(), "got 2")
	must.ErrorContains(t, Attr{String: StringAttr("x").String, Unit: UnitMiB}.Validate(), "only a number can have a unit")
	must.Eq(t, `string "100"`, StringAttr("100").GoString())
	must.Eq(t, "integer 16 MiB", IntAttr(16, UnitMiB).GoString())
}
