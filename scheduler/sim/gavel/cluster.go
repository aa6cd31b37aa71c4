package gavel

import (
	"fmt"
	"strings"

	"github.com/gpushare/gpushare/devicefn/topologies"
	"github.com/gpushare/gpushare/scheduler/placement"
	simrun "github.com/gpushare/gpushare/scheduler/sim"
)

// Cluster is the simulated cluster: Nodes servers of GPUsPerNode V100s
// with a real server's link matrix.
type Cluster struct {
	Name        string `json:"name"`
	Nodes       int    `json:"nodes"`
	GPUsPerNode int    `json:"gpus_per_node"`
	Topology    string `json:"topology"`
}

// Clusters are the presets: 16 servers of 4 V100s on PCIe (two sockets)
// and 8 DGX-1 V100 servers.
var Clusters = map[string]Cluster{
	"pcie": {Name: "pcie", Nodes: 16, GPUsPerNode: 4, Topology: topologies.PCIe2Socket},
	"dgx1": {Name: "dgx1", Nodes: 8, GPUsPerNode: 8, Topology: topologies.DGX1V100},
}

// ParseCluster reads a preset name, optionally with a node count
// ("pcie", "dgx1", "pcie:32").
func ParseCluster(s string) (Cluster, error) {
	name, count, _ := strings.Cut(s, ":")
	c, ok := Clusters[name]
	if !ok {
		return Cluster{}, fmt.Errorf("unknown cluster %q: want pcie or dgx1, optionally with :<nodes>", s)
	}
	if count != "" {
		var n int
		if _, err := fmt.Sscan(count, &n); err != nil || n < 1 || n > 4096 {
			return Cluster{}, fmt.Errorf("cluster %q: node count %q must be within 1..4096", s, count)
		}
		c.Nodes = n
		c.Name = fmt.Sprintf("%s:%d", name, n)
	}
	return c, nil
}

// GPUs is the cluster's GPU count.
func (c Cluster) GPUs() int { return c.Nodes * c.GPUsPerNode }

// snapshot is the cluster's nodes with GPUs of the given model.
func (c Cluster) snapshot(model string) (*placement.Snapshot, error) {
	s := placement.NewSnapshot()
	for i := range c.Nodes {
		n, err := simrun.NodeFromSpec(simrun.NodeSpec{ID: fmt.Sprintf("node-%03d", i), CPU: 1 << 40, MemoryMiB: 1 << 40,
			GPUs: c.GPUsPerNode, Model: model, Topology: c.Topology})
		if err != nil {
			return nil, err
		}
		if err := s.AddNode(n); err != nil {
			return nil, err
		}
	}
	return s, nil
}
