package devicefn

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// TestGPUGroupsRoundTrip: what the plugin encodes per GPU decodes back
// exactly, and merging a node's per-GPU groups gives the per-model groups
// of today's contract, marked PerGPU.
func TestGPUGroupsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		inv := randomInventory(r, 1+r.IntN(16))
		must.NoError(t, inv.Validate())
		shares := 1 + r.IntN(MaxSharesPerGPU)
		var skip map[string]bool
		if len(inv.GPUs) > 2 && r.IntN(3) == 0 {
			skip = map[string]bool{inv.GPUs[1].UUID: true}
		}
		per := GPUGroups(inv, shares, SharingTimeslice, skip)
		ranked := trial%2 == 0 // a plugin that fingerprints cell ranks, or an older one
		ranks := r.Perm(len(inv.GPUs))
		for k := range per {
			per[k].Ranked, per[k].CellRank = ranked, ranks[per[k].Index]
			if !ranked {
				per[k].CellRank = 0
			}
		}
		var decoded []GPUGroup
		names := map[string]bool{}
		for _, g := range per {
			attrs := g.Attributes()
			for k, a := range attrs {
				must.NoError(t, a.Validate(), must.Sprintf("attribute %s", k))
			}
			must.True(t, IsGPUGroup(attrs))
			must.Eq(t, g.Model, ModelOfDevice(g.Name(), attrs))
			must.False(t, names[g.Name()], must.Sprintf("name %q twice on a node", g.Name()))
			names[g.Name()] = true
			_, hasRank := attrs[AttrCellRank]
			must.Eq(t, ranked, hasRank)
			got, err := DecodeGPUGroup(g.Name(), attrs)
			must.NoError(t, err, must.Sprintf("trial %d", trial))
			must.Eq(t, g, *got, must.Sprintf("trial %d", trial))
			decoded = append(decoded, *got)
		}
		merged, err := MergeGPUGroups(decoded)
		must.NoError(t, err, must.Sprintf("trial %d", trial))
		want := Groups(inv, shares, SharingTimeslice, skip)
		index := map[string]int{}
		for _, g := range inv.GPUs {
			index[g.UUID] = g.Index
		}
		for i := range want {
			want[i].PerGPU = true
			if ranked { // each GPU's rank, in the group's GPU order
				for _, g := range want[i].GPUs {
					want[i].CellRanks = append(want[i].CellRanks, ranks[index[g.UUID]])
				}
			}
		}
		must.Eq(t, want, merged, must.Sprintf("trial %d", trial))
	}
}

func TestGPUGroupNames(t *testing.T) {
	x, nv := Link{Kind: LinkSelf}, Link{Kind: LinkNVLink, NVLinks: 12}
	inv := &Inventory{DriverVersion: "550", CUDAVersion: "12.4", Links: Matrix{{x, nv}, {nv, x}}, GPUs: []GPU{
		{Index: 0, UUID: "GPU-a", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMANode: 0},
		{Index: 1, UUID: "GPU-b", Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMANode: 0},
	}}
	gs := GPUGroups(inv, 100, SharingMPS, nil)
	must.SliceLen(t, 2, gs)
	must.Eq(t, "NVIDIA A100-SXM4-40GB GPU 1", gs[1].Name())
	attrs := gs[1].Attributes()
	must.Eq(t, "NVIDIA A100-SXM4-40GB", *attrs[AttrModel].String)
	must.Eq(t, int64(1), *attrs[AttrGPUIndex].Int)
	must.Eq(t, "NV12,X", *attrs[AttrNodeLinks].String)
	must.Eq(t, "GPU-b", *attrs["gpu0.uuid"].String)
	must.Eq(t, int64(1), *attrs[AttrGPUs].Int)
	// a per-model group is not a per-GPU one, and keeps its name as model
	g := Groups(inv, 100, SharingMPS, nil)[0]
	must.False(t, IsGPUGroup(g.Attributes()))
	must.Eq(t, g.Model, ModelOfDevice(g.Model, g.Attributes()))
}

func TestDecodeGPUGroupRefuses(t *testing.T) {
	x, nv := Link{Kind: LinkSelf}, Link{Kind: LinkNVLink, NVLinks: 12}
	inv := &Inventory{DriverVersion: "550", CUDAVersion: "12.4", Links: Matrix{{x, nv}, {nv, x}}, GPUs: []GPU{
		{Index: 0, UUID: "GPU-a", Model: "M", MemoryMiB: 1024},
		{Index: 1, UUID: "GPU-b", Model: "M", MemoryMiB: 1024},
	}}
	gs := GPUGroups(inv, 100, SharingMPS, nil)
	for _, c := range []struct {
		name string
		edit func(map[string]Attr) string
	}{
		{"wrong name", func(map[string]Attr) string { return "M GPU 0" }},
		{"index not X", func(a map[string]Attr) string { a[AttrGPUIndex] = IntAttr(0, ""); return "M GPU 0" }},
		{"index beyond the row", func(a map[string]Attr) string { a[AttrGPUIndex] = IntAttr(5, ""); return "M GPU 5" }},
		{"no model", func(a map[string]Attr) string { delete(a, AttrModel); return "M GPU 1" }},
		{"bad links", func(a map[string]Attr) string { a[AttrNodeLinks] = StringAttr("NV2,Q"); return "M GPU 1" }},
		{"cell rank beyond the row", func(a map[string]Attr) string { a[AttrCellRank] = IntAttr(2, ""); return "M GPU 1" }},
		{"negative cell rank", func(a map[string]Attr) string { a[AttrCellRank] = IntAttr(-1, ""); return "M GPU 1" }},
		{"cell rank not an integer", func(a map[string]Attr) string { a[AttrCellRank] = StringAttr("1"); return "M GPU 1" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			attrs := gs[1].Attributes()
			name := c.edit(attrs)
			_, err := DecodeGPUGroup(name, attrs)
			must.ErrorIs(t, err, ErrBadAttributes)
		})
	}
	// a node whose groups are not all ranked (an older plugin's among
	// them) merges without ranks: Nomad could not order them
	ranked := slices.Clone(gs)
	ranked[0].Ranked, ranked[0].CellRank = true, 1
	ranked[1].Ranked, ranked[1].CellRank = true, 0
	merged, err := MergeGPUGroups(ranked)
	must.NoError(t, err)
	must.Eq(t, []int{1, 0}, merged[0].CellRanks)
	ranked[1].Ranked, ranked[1].CellRank = false, 0
	merged, err = MergeGPUGroups(ranked)
	must.NoError(t, err)
	must.Nil(t, merged[0].CellRanks)
	// two groups of one model that disagree do not merge
	b := gs[1]
	b.SharesPerGPU = 50
	_, err = MergeGPUGroups([]GPUGroup{gs[0], b})
	must.ErrorIs(t, err, ErrBadAttributes)
	_, err = MergeGPUGroups([]GPUGroup{gs[0], gs[0]})
	must.ErrorIs(t, err, ErrBadAttributes)
}

// FuzzDecodeGPUGroup: any name, index, node_links (and a cell rank
// derived from them) either decode to a
// group whose encoding decodes back to it, or are refused; never a panic.
// A decoded group always merges.
func FuzzDecodeGPUGroup(f *testing.F) {
	f.Add("M GPU 1", int64(1), "NV12,X")
	f.Add("M GPU 0", int64(0), "X")
	f.Add("M GPU 2", int64(2), "SYS,PIX,X,NV1")
	f.Add("M GPU -1", int64(-1), "X")
	f.Fuzz(func(t *testing.T, name string, index int64, links string) {
		inv := &Inventory{DriverVersion: "550", CUDAVersion: "12.4", Links: Matrix{{{Kind: LinkSelf}}}, GPUs: []GPU{{UUID: "GPU-a", Model: "M", MemoryMiB: 1024}}}
		attrs := GPUGroups(inv, 100, SharingMPS, nil)[0].Attributes()
		attrs[AttrGPUIndex] = IntAttr(index, "")
		attrs[AttrNodeLinks] = StringAttr(links)
		if len(links)%2 == 0 { // a cell rank too, in range or not
			attrs[AttrCellRank] = IntAttr(int64(len(links)/3)-index, "")
		}
		g, err := DecodeGPUGroup(name, attrs)
		if err != nil {
			return
		}
		again, err := DecodeGPUGroup(g.Name(), g.Attributes())
		must.NoError(t, err)
		must.Eq(t, g, again)
		_, err = MergeGPUGroups([]GPUGroup{*g})
		must.NoError(t, err)
	})
}

// TestMultiGPURoundTripsAndMergesOnlyWhenEveryGPUSaysSo: a per-GPU group
// whose plugin composes several of them in one task says so (multi_gpu =
// "interposer"), decodes back, and the merged group is MultiGPU only when
// every GPU of its model is; any other value is refused, and an older
// plugin's group (no attribute) is not MultiGPU.
func TestMultiGPURoundTripsAndMergesOnlyWhenEveryGPUSaysSo(t *testing.T) {
	inv := randomInventory(rand.New(rand.NewPCG(5, 6)), 4)
	for i := range inv.GPUs {
		inv.GPUs[i].Model = "A100"
	}
	per := GPUGroups(inv, 100, SharingMPS, nil)
	var decoded []GPUGroup
	for _, g := range per {
		g.MultiGPU = true
		attrs := g.Attributes()
		must.Eq(t, MultiGPUInterposer, *attrs[AttrMultiGPU].String)
		got, err := DecodeGPUGroup(g.Name(), attrs)
		must.NoError(t, err)
		must.True(t, got.MultiGPU)
		decoded = append(decoded, *got)
	}
	merged, err := MergeGPUGroups(decoded)
	must.NoError(t, err)
	must.True(t, merged[0].MultiGPU)

	decoded[2].MultiGPU = false
	merged, err = MergeGPUGroups(decoded)
	must.NoError(t, err)
	must.False(t, merged[0].MultiGPU, must.Sprint("one GPU of the model cannot be composed"))

	attrs := per[0].Attributes()
	_, present := attrs[AttrMultiGPU]
	must.False(t, present)
	got, err := DecodeGPUGroup(per[0].Name(), attrs)
	must.NoError(t, err)
	must.False(t, got.MultiGPU)
	attrs[AttrMultiGPU] = StringAttr("yes")
	_, err = DecodeGPUGroup(per[0].Name(), attrs)
	must.ErrorIs(t, err, ErrBadAttributes)
}
