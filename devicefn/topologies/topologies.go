package topologies

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/gpushare/gpushare/devicefn"
)

//go:embed data/gpu_link_matrices.json
var raw []byte

// Short names of the embedded servers.
const (
	DGX1V100    = "dgx1-v100"
	DGX1PCIe    = "dgx1-pcie"
	DGXA100     = "dgx-a100"
	HGXH100     = "hgx-h100"
	PCIe2Socket = "pcie-2socket"
)

var files = map[string]string{
	DGX1V100:    "dgx1_v100_topo_m.txt",
	DGX1PCIe:    "dgx1_topo_mp_pcie_only_view.txt",
	DGXA100:     "dgx_a100_topo_m.txt",
	HGXH100:     "hgx_h100_topo_m_gpu_rows.txt",
	PCIe2Socket: "pcie_4gpu_2socket_legacy_soc.txt",
}

// Topology is one server's GPUs.
type Topology struct {
	Name  string
	Links devicefn.Matrix
	// NUMA is each GPU's NUMA node, numbered by distinct CPU affinity in
	// order of first appearance.
	NUMA []int
}

// Names lists the embedded topologies.
func Names() []string {
	out := make([]string, 0, len(files))
	for n := range files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns an embedded topology by short name.
func Get(name string) (Topology, error) {
	file, ok := files[name]
	if !ok {
		return Topology{}, fmt.Errorf("unknown topology %q: want one of %v", name, Names())
	}
	var all map[string]struct {
		Matrix   [][]string `json:"gpu_link_matrix"`
		Affinity []string   `json:"cpu_affinity"`
	}
	if err := json.Unmarshal(raw, &all); err != nil {
		return Topology{}, fmt.Errorf("embedded topologies: %w", err)
	}
	e := all[file]
	t := Topology{Name: name, Links: make(devicefn.Matrix, len(e.Matrix)), NUMA: make([]int, len(e.Matrix))}
	for i, row := range e.Matrix {
		t.Links[i] = make([]devicefn.Link, len(row))
		for j, s := range row {
			l, err := devicefn.ParseLink(s)
			if err != nil {
				return Topology{}, fmt.Errorf("topology %s [%d][%d]: %w", name, i, j, err)
			}
			t.Links[i][j] = l
		}
	}
	seen := map[string]int{}
	for i, a := range e.Affinity {
		if _, ok := seen[a]; !ok {
			seen[a] = len(seen)
		}
		t.NUMA[i] = seen[a]
	}
	return t, t.Links.Validate()
}

// MustGet is Get for tests and static tables; it panics on an unknown name.
func MustGet(name string) Topology {
	t, err := Get(name)
	if err != nil {
		panic(err)
	}
	return t
}
