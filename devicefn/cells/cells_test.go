package cells

import (
	"fmt"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/shoenig/test/must"
)

// describe lists the cells of a tree by size, for example "2:{0,3} 2:{1,2}".
func describe(t *Tree, size int) []string {
	var out []string
	for i := range t.Cells {
		if t.Cells[i].Size() == size {
			out = append(out, FormatGPUs(t.Cells[i].GPUs))
		}
	}
	return out
}

func build(t *testing.T, name string) *Tree {
	t.Helper()
	topo := topologies.MustGet(name)
	tree, err := Build(topo.Links, topo.NUMA)
	must.NoError(t, err)
	return tree
}

func TestBuildRealTopologies(t *testing.T) {
	cases := []struct {
		topo         string
		pairs, quads []string
		rootWorst    string
	}{
		// Cube-mesh: the NV2 pairs inside each socket, one NVLink quad per socket.
		{topologies.DGX1V100, []string{"{0,3}", "{1,2}", "{4,7}", "{5,6}"}, []string{"{0-3}", "{4-7}"}, "SYS"},
		{topologies.DGX1PCIe, []string{"{0,1}", "{2,3}", "{4,5}", "{6,7}"}, []string{"{0-3}", "{4-7}"}, "SYS"},
		{topologies.HGXH100, []string{"{0,1}", "{2,3}", "{4,5}", "{6,7}"}, []string{"{0-3}", "{4-7}"}, "NV18"},
		{topologies.DGXA100, []string{"{0,1}", "{2,3}", "{4,5}", "{6,7}"}, []string{"{0-3}", "{4-7}"}, "NV12"},
		{topologies.PCIe2Socket, []string{"{0,1}", "{2,3}"}, []string{"{0-3}"}, "SYS"},
	}
	for _, tc := range cases {
		t.Run(tc.topo, func(t *testing.T) {
			tree := build(t, tc.topo)
			must.Eq(t, tc.pairs, describe(tree, 2))
			must.Eq(t, tc.quads, describe(tree, 4))
			must.Eq(t, tc.rootWorst, tree.Cells[tree.Root].Worst.String())
			checkTree(t, tree, len(tree.Leaf))
		})
	}
}

func TestDGX1PairsAreNV2(t *testing.T) {
	tree := build(t, topologies.DGX1V100)
	for i := range tree.Cells {
		if tree.Cells[i].Size() == 2 {
			must.Eq(t, "NV2", tree.Cells[i].Worst.String(), must.Sprint(tree.Name(i)))
		}
		if tree.Cells[i].Size() == 4 {
			must.Eq(t, devicefn.LinkNVLink, tree.Cells[i].Worst.Kind)
			must.True(t, tree.Cells[i].NUMA)
		}
	}
	must.Eq(t, "NV2 pair {0,3}", tree.Name(tree.Smallest([]int{0, 3})))
	must.Eq(t, "NV1 NUMA quad {0-3}", tree.Name(tree.Smallest([]int{0, 1})))
	must.Eq(t, "SYS node octet {0-7}", tree.Name(tree.Smallest([]int{0, 4})))
}

func TestUnknownNUMAUsesSYSComponents(t *testing.T) {
	topo := topologies.MustGet(topologies.PCIe2Socket)
	tree, err := Build(topo.Links, []int{-1, -1, -1, -1})
	must.NoError(t, err)
	must.Eq(t, []string{"{0,1}", "{2,3}"}, describe(tree, 2))
	must.True(t, tree.Cells[tree.Smallest([]int{0, 1})].NUMA)
}

// checkTree asserts the invariants of every tree: children partition their
// parent, cells on one level never overlap, and every GPU has one leaf.
func checkTree(t *testing.T, tree *Tree, n int) {
	t.Helper()
	for g := range tree.Leaf { // kept by Build: what Name and Smallest say of one GPU
		must.Eq(t, tree.Name(tree.Smallest([]int{g})), tree.CellName(g))
	}
	must.Eq(t, n, tree.Cells[tree.Root].Size())
	for i, c := range tree.Cells {
		if len(c.Children) == 0 {
			must.Eq(t, 1, c.Size())
			must.Eq(t, i, tree.Leaf[c.GPUs[0]])
			continue
		}
		seen := map[int]bool{}
		for _, ch := range c.Children {
			must.Eq(t, i, tree.Cells[ch].Parent)
			for _, g := range tree.Cells[ch].GPUs {
				must.False(t, seen[g], must.Sprintf("GPU %d in two children of %s", g, tree.Name(i)))
				seen[g] = true
			}
		}
		must.Eq(t, c.Size(), len(seen))
	}
	// Any two cells are nested or disjoint.
	for i := range tree.Cells {
		for j := range tree.Cells {
			a, b := tree.Cells[i].GPUs, tree.Cells[j].GPUs
			inter := 0
			for _, x := range a {
				for _, y := range b {
					if x == y {
						inter++
					}
				}
			}
			must.True(t, inter == 0 || inter == len(a) || inter == len(b), must.Sprintf("cells %v and %v overlap", a, b))
		}
	}
}

func TestBuildOddAndLarge(t *testing.T) {
	for _, n := range []int{1, 3, 5, 12, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := make(devicefn.Matrix, n)
			numa := make([]int, n)
			for i := range n {
				m[i] = make([]devicefn.Link, n)
				for j := range n {
					switch {
					case i == j:
						m[i][j] = devicefn.Link{Kind: devicefn.LinkSelf}
					case i/4 == j/4:
						m[i][j] = devicefn.Link{Kind: devicefn.LinkPIX}
					default:
						m[i][j] = devicefn.Link{Kind: devicefn.LinkPHB}
					}
				}
				numa[i] = i / 8
			}
			tree, err := Build(m, numa)
			must.NoError(t, err)
			checkTree(t, tree, n)
		})
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	_, err := Build(devicefn.Matrix{{{Kind: devicefn.LinkNVLink, NVLinks: 1}}}, []int{0})
	must.Error(t, err)
	topo := topologies.MustGet(topologies.HGXH100)
	_, err = Build(topo.Links, []int{0})
	must.Error(t, err)
}

// FuzzBuild derives trees from arbitrary symmetric matrices (the upper
// triangle is taken from the input bytes) and checks the tree invariants.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5}, uint8(4))
	f.Add([]byte{6, 6, 6, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4}, uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		n := int(size%12) + 1
		kinds := []devicefn.Link{{Kind: devicefn.LinkNVLink, NVLinks: 1}, {Kind: devicefn.LinkNVLink, NVLinks: 2},
			{Kind: devicefn.LinkPIX}, {Kind: devicefn.LinkPXB}, {Kind: devicefn.LinkPHB}, {Kind: devicefn.LinkNODE}, {Kind: devicefn.LinkSYS}}
		m := make(devicefn.Matrix, n)
		for i := range m {
			m[i] = make([]devicefn.Link, n)
			m[i][i] = devicefn.Link{Kind: devicefn.LinkSelf}
		}
		k := 0
		for i := range n {
			for j := i + 1; j < n; j++ {
				var b byte
				if k < len(data) {
					b = data[k]
				}
				k++
				m[i][j] = kinds[int(b)%len(kinds)]
				m[j][i] = m[i][j]
			}
		}
		numa := make([]int, n)
		for i := range numa {
			numa[i] = -1
		}
		tree, err := Build(m, numa)
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, tree, n)
	})
}

// A node without GPUs has no cell to name.
func TestCellNameWithoutGPUs(t *testing.T) {
	tree, err := Build(devicefn.Matrix{}, nil)
	must.NoError(t, err)
	must.Eq(t, "no cell", tree.CellName(0))
}
