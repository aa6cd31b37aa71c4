package cells

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
)

// Cell is one cell of a node's tree.
type Cell struct {
	// GPUs are the indices (into the matrix) of the cell's GPUs, ascending.
	GPUs []int
	// Parent is the index of the parent cell in Tree.Cells, -1 for the root.
	Parent int
	// Children are indices into Tree.Cells.
	Children []int
	// Worst is the worst link between two GPUs of the cell (X for one GPU).
	Worst devicefn.Link
	// NUMA is true when the cell is exactly one NUMA node's GPUs.
	NUMA bool
	// Depth is 0 for the root.
	Depth int
}

// Size is the number of GPUs in the cell.
func (c *Cell) Size() int { return len(c.GPUs) }

// Tree is the cell hierarchy of one node. Cells[Root] holds every GPU;
// Leaf[i] is the cell of GPU i alone.
type Tree struct {
	Cells []Cell
	Root  int
	Leaf  []int
	// gpuCells are CellName's answers, by GPU, kept by Build.
	gpuCells []string
}

// Build derives the cell tree of a node from its link matrix and the NUMA
// node of each GPU (-1 when unknown; then GPUs joined by anything better than
// SYS form a NUMA domain). The matrix must be valid.
func Build(m devicefn.Matrix, numa []int) (*Tree, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	n := len(m)
	if n == 0 {
		return &Tree{Root: -1}, nil
	}
	if len(numa) != n {
		return nil, fmt.Errorf("%d NUMA nodes given for %d GPUs", len(numa), n)
	}
	b := builder{m: m, t: &Tree{Leaf: make([]int, n)}}
	for i := range n {
		b.t.Leaf[i] = b.add(Cell{GPUs: []int{i}, Parent: -1, Worst: devicefn.Link{Kind: devicefn.LinkSelf}})
	}
	var tops []int
	for _, dom := range domains(m, numa) {
		leaves := make([]int, len(dom))
		for k, g := range dom {
			leaves[k] = b.t.Leaf[g]
		}
		top := b.merge(leaves)
		if len(domains(m, numa)) > 1 {
			b.t.Cells[top].NUMA = true
		}
		tops = append(tops, top)
	}
	b.t.Root = b.merge(tops)
	if len(tops) == 1 && len(b.t.Cells[b.t.Root].GPUs) > 0 {
		b.t.Cells[b.t.Root].NUMA = true
	}
	b.depth(b.t.Root, 0)
	b.t.gpuCells = make([]string, n)
	for g := range n {
		b.t.gpuCells[g] = b.t.Name(b.t.Smallest([]int{g}))
	}
	return b.t, nil
}

// CellName is Name(Smallest([]int{g})), the cell of GPU g alone, as Build
// found it: every placement of one GPU names it.
func (t *Tree) CellName(g int) string {
	if g >= 0 && g < len(t.gpuCells) {
		return t.gpuCells[g]
	}
	return t.Name(t.Smallest([]int{g}))
}

// domains groups GPU indices by NUMA node, in order of their first GPU.
func domains(m devicefn.Matrix, numa []int) [][]int {
	known := true
	for _, v := range numa {
		known = known && v >= 0
	}
	label := make([]int, len(m))
	if known {
		copy(label, numa)
	} else {
		// Connected components of the better-than-SYS graph.
		for i := range label {
			label[i] = -1
		}
		for i := range m {
			if label[i] >= 0 {
				continue
			}
			stack := []int{i}
			label[i] = i
			for len(stack) > 0 {
				a := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				for b := range m {
					if label[b] < 0 && m[a][b].Kind < devicefn.LinkSYS {
						label[b] = i
						stack = append(stack, b)
					}
				}
			}
		}
	}
	var out [][]int
	idx := map[int]int{}
	for g, l := range label {
		k, ok := idx[l]
		if !ok {
			k = len(out)
			idx[l] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], g)
	}
	return out
}

type builder struct {
	m devicefn.Matrix
	t *Tree
}

func (b *builder) add(c Cell) int {
	b.t.Cells = append(b.t.Cells, c)
	return len(b.t.Cells) - 1
}

func (b *builder) depth(c, d int) {
	b.t.Cells[c].Depth = d
	for _, ch := range b.t.Cells[c].Children {
		b.depth(ch, d+1)
	}
}

// Score ranks a link: higher is better.
func Score(l devicefn.Link) int {
	switch l.Kind {
	case devicefn.LinkSelf:
		return 1000
	case devicefn.LinkNVLink:
		return 100 + l.NVLinks
	}
	return 10 * int(devicefn.LinkSYS-l.Kind+1)
}

// cross is the worst link between the GPUs of two cells.
func (b *builder) cross(x, y int) devicefn.Link {
	worst := devicefn.Link{Kind: devicefn.LinkSelf}
	for _, i := range b.t.Cells[x].GPUs {
		for _, j := range b.t.Cells[y].GPUs {
			if worst.Better(b.m[i][j]) {
				worst = b.m[i][j]
			}
		}
	}
	return worst
}

// merge joins cells pairwise, buddy-style, best-connected pairs first, until
// one cell is left, and returns it.
func (b *builder) merge(cur []int) int {
	for len(cur) > 1 {
		pairs := b.match(cur)
		next := make([]int, 0, (len(cur)+1)/2)
		for _, p := range pairs {
			if p[1] < 0 {
				next = append(next, p[0])
				continue
			}
			x, y := p[0], p[1]
			gpus := append(append([]int(nil), b.t.Cells[x].GPUs...), b.t.Cells[y].GPUs...)
			sort.Ints(gpus)
			worst := b.cross(x, y)
			for _, c := range []int{x, y} {
				if worst.Better(b.t.Cells[c].Worst) {
					worst = b.t.Cells[c].Worst
				}
			}
			id := b.add(Cell{GPUs: gpus, Parent: -1, Children: []int{x, y}, Worst: worst})
			b.t.Cells[x].Parent, b.t.Cells[y].Parent = id, id
			next = append(next, id)
		}
		sort.Slice(next, func(i, j int) bool { return b.t.Cells[next[i]].GPUs[0] < b.t.Cells[next[j]].GPUs[0] })
		cur = next
	}
	return cur[0]
}

// match pairs up cells to maximise the summed score of the worst link of each
// pair (exactly for up to 10 cells, greedily beyond). An odd cell out is
// returned as {c, -1}.
func (b *builder) match(cur []int) [][2]int {
	n := len(cur)
	w := make([][]int, n)
	for i := range n {
		w[i] = make([]int, n)
		for j := range n {
			if i != j {
				w[i][j] = Score(b.cross(cur[i], cur[j]))
			}
		}
	}
	var best [][2]int
	if n <= 10 {
		bestScore := -1
		used := make([]bool, n)
		var pick [][2]int
		var rec func(score int, odd bool)
		rec = func(score int, odd bool) {
			i := 0
			for i < n && used[i] {
				i++
			}
			if i == n {
				if score > bestScore {
					bestScore = score
					best = append([][2]int(nil), pick...)
				}
				return
			}
			used[i] = true
			for j := i + 1; j < n; j++ {
				if used[j] {
					continue
				}
				used[j] = true
				pick = append(pick, [2]int{i, j})
				rec(score+w[i][j], odd)
				pick = pick[:len(pick)-1]
				used[j] = false
			}
			if n%2 == 1 && !odd {
				pick = append(pick, [2]int{i, -1})
				rec(score, true)
				pick = pick[:len(pick)-1]
			}
			used[i] = false
		}
		rec(0, false)
	} else {
		type edge struct{ i, j, s int }
		var edges []edge
		for i := range n {
			for j := i + 1; j < n; j++ {
				edges = append(edges, edge{i, j, w[i][j]})
			}
		}
		sort.SliceStable(edges, func(a, c int) bool { return edges[a].s > edges[c].s })
		used := make([]bool, n)
		for _, e := range edges {
			if !used[e.i] && !used[e.j] {
				used[e.i], used[e.j] = true, true
				best = append(best, [2]int{e.i, e.j})
			}
		}
		for i := range n {
			if !used[i] {
				best = append(best, [2]int{i, -1})
			}
		}
	}
	out := make([][2]int, len(best))
	for k, p := range best {
		out[k] = [2]int{cur[p[0]], -1}
		if p[1] >= 0 {
			out[k][1] = cur[p[1]]
		}
	}
	return out
}

// Smallest returns the smallest cell that holds all of gpus (-1 if none).
func (t *Tree) Smallest(gpus []int) int {
	if len(gpus) == 0 || t.Root < 0 {
		return -1
	}
	c := t.Leaf[gpus[0]]
	for {
		if containsAll(t.Cells[c].GPUs, gpus) {
			return c
		}
		c = t.Cells[c].Parent
		if c < 0 {
			return -1
		}
	}
}

func containsAll(set, sub []int) bool {
	for _, g := range sub {
		found := false
		for _, s := range set {
			if s == g {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Name describes a cell for reasons, for example "NV2 pair {0,3}" or
// "NUMA quad {0-3}".
func (t *Tree) Name(c int) string {
	if c < 0 {
		return "no cell"
	}
	cell := &t.Cells[c]
	var kind string
	switch n := cell.Size(); n {
	case 1:
		return "gpu " + strconv.Itoa(cell.GPUs[0])
	case 2:
		kind = "pair"
	case 4:
		kind = "quad"
	case 8:
		kind = "octet"
	default:
		kind = strconv.Itoa(n) + "-gpu group"
	}
	if c == t.Root {
		kind = "node " + kind
	} else if cell.NUMA {
		kind = "NUMA " + kind
	}
	return cell.Worst.String() + " " + kind + " " + FormatGPUs(cell.GPUs)
}

// FormatGPUs writes GPU indices compactly, for example "{0-3}" or "{0,3}".
func FormatGPUs(gpus []int) string {
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j+1 < len(gpus) && gpus[j+1] == gpus[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, strconv.Itoa(gpus[i])+"-"+strconv.Itoa(gpus[j]))
		case j > i:
			parts = append(parts, strconv.Itoa(gpus[i]), strconv.Itoa(gpus[j]))
		default:
			parts = append(parts, strconv.Itoa(gpus[i]))
		}
		i = j + 1
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Worst returns the worst link among a set of GPUs.
func Worst(m devicefn.Matrix, gpus []int) devicefn.Link {
	worst := devicefn.Link{Kind: devicefn.LinkSelf}
	for a, i := range gpus {
		for _, j := range gpus[a+1:] {
			if worst.Better(m[i][j]) {
				worst = m[i][j]
			}
		}
	}
	return worst
}

// LeafOrder lists the tree's GPUs as its leaves read left to right: depth
// first from the root, a cell's children in order of their lowest GPU.
// GPUs next to each other in it share the smallest cells, so taking GPUs
// in this order fills a best-connected cell before starting another
// (DGX-1: 0, 3, 1, 2, 4, 7, 5, 6, where index order would pair 0 with 1
// over one NVLink). Nil for a tree of no GPUs.
func (t *Tree) LeafOrder() []int {
	if t.Root < 0 {
		return nil
	}
	out := make([]int, 0, len(t.Leaf))
	var walk func(c int)
	walk = func(c int) {
		ch := t.Cells[c].Children
		if len(ch) == 0 {
			out = append(out, t.Cells[c].GPUs...)
			return
		}
		ch = append([]int(nil), ch...)
		sort.Slice(ch, func(i, j int) bool { return t.Cells[ch[i]].GPUs[0] < t.Cells[ch[j]].GPUs[0] })
		for _, x := range ch {
			walk(x)
		}
	}
	walk(t.Root)
	return out
}

// Ranks is each GPU's position in LeafOrder, by GPU: the cell rank a
// device plugin fingerprints per GPU (devicefn.AttrCellRank) so that
// Nomad, asked to prefer low ranks, takes GPUs in the tree's order.
func (t *Tree) Ranks() []int {
	order := t.LeafOrder()
	out := make([]int, len(order))
	for r, g := range order {
		out[g] = r
	}
	return out
}
