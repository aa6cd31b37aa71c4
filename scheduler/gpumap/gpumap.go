package gpumap

import (
	"sort"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/hashicorp/nomad/api"
)

// Map is the GPU map of a cluster.
type Map struct {
	Nodes []Node `json:"nodes"`
	// Problems are nodes whose gpushare attributes could not be decoded.
	Problems []string `json:"problems,omitempty"`
}

// Node is one Nomad node with gpushare devices.
type Node struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Status       string `json:"status"`
	Model        string `json:"model"`
	Sharing      string `json:"sharing"`
	SharesPerGPU int    `json:"shares_per_gpu"`
	GPUs         []GPU  `json:"gpus"`
}

// GPU is one GPU and the allocations using its shares.
type GPU struct {
	Index    int     `json:"index"`
	UUID     string  `json:"uuid"`
	NUMANode int     `json:"numa_node"`
	Links    string  `json:"links"`
	Healthy  bool    `json:"healthy"`
	Health   string  `json:"health,omitempty"`
	Shares   int     `json:"shares"`
	Used     int     `json:"used"`
	Users    []Usage `json:"users,omitempty"`
}

// Usage is one allocation's shares of a GPU, or (Other) the shares the
// allocations of namespaces the reader may not see hold on it.
type Usage struct {
	AllocID   string `json:"alloc_id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Job       string `json:"job,omitempty"`
	Group     string `json:"group,omitempty"`
	Shares    int    `json:"shares"`
	// Other marks the shares used by another namespace: who holds them
	// is not shown (Hide).
	Other bool `json:"other_namespace,omitempty"`
}

// Build makes the map from full node objects and the cluster's allocations;
// terminal allocations are ignored.
func Build(nodes []*api.Node, allocs []*api.Allocation) *Map {
	m := &Map{}
	where := map[string]*GPU{} // GPU UUID -> GPU in m
	for _, n := range nodes {
		if n.NodeResources == nil {
			continue
		}
		for _, d := range n.NodeResources.Devices {
			if d == nil || d.Vendor != devicefn.Vendor || d.Type != devicefn.DeviceType {
				continue
			}
			g, err := nomadattr.DecodeGroup(d)
			if err != nil {
				m.Problems = append(m.Problems, "node "+n.Name+": "+err.Error())
				continue
			}
			health := map[string]*api.NodeDevice{}
			for _, inst := range d.Instances {
				if inst == nil {
					continue
				}
				if id, err := devicefn.ParseShareID(inst.ID); err == nil {
					if prev, ok := health[id.UUID]; !ok || (prev.Healthy && !inst.Healthy) {
						health[id.UUID] = inst
					}
				}
			}
			node := Node{ID: n.ID, Name: n.Name, Status: n.Status, Model: g.Model, Sharing: g.Sharing, SharesPerGPU: g.SharesPerGPU}
			for i, gpu := range g.GPUs {
				out := GPU{Index: i, UUID: gpu.UUID, NUMANode: gpu.NUMANode, Links: devicefn.EncodeRow(gpu.Links), Shares: g.SharesPerGPU, Healthy: true}
				if inst := health[gpu.UUID]; inst != nil {
					out.Healthy, out.Health = inst.Healthy, inst.HealthDescription
				}
				node.GPUs = append(node.GPUs, out)
			}
			m.Nodes = append(m.Nodes, node)
		}
	}
	sort.Slice(m.Nodes, func(i, j int) bool {
		if m.Nodes[i].Name != m.Nodes[j].Name {
			return m.Nodes[i].Name < m.Nodes[j].Name
		}
		return m.Nodes[i].Model < m.Nodes[j].Model
	})
	for i := range m.Nodes {
		for j := range m.Nodes[i].GPUs {
			where[m.Nodes[i].GPUs[j].UUID] = &m.Nodes[i].GPUs[j]
		}
	}
	for _, a := range allocs {
		if a.ClientTerminalStatus() || a.ServerTerminalStatus() || a.AllocatedResources == nil {
			continue
		}
		per := map[string]int{}
		for _, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			for _, d := range tr.Devices {
				if d == nil || d.Vendor != devicefn.Vendor || d.Type != devicefn.DeviceType {
					continue
				}
				for _, id := range d.DeviceIDs {
					if sid, err := devicefn.ParseShareID(id); err == nil {
						per[sid.UUID]++
					}
				}
			}
		}
		for uuid, n := range per {
			g := where[uuid]
			if g == nil {
				continue
			}
			g.Used += n
			ns := a.Namespace
			if ns == "" {
				ns = "default"
			}
			g.Users = append(g.Users, Usage{AllocID: a.ID, Namespace: ns, Job: a.JobID, Group: a.TaskGroup, Shares: n})
		}
	}
	for _, g := range where {
		sort.Slice(g.Users, func(i, j int) bool { return g.Users[i].AllocID < g.Users[j].AllocID })
	}
	return m
}

// Hide replaces, on every GPU, the usage of the namespaces visible does
// not accept by one anonymous usage of their shares (Other): the reader
// sees that the shares are used, not by which job, group or allocation.
func (m *Map) Hide(visible func(namespace string) bool) {
	for i := range m.Nodes {
		for j := range m.Nodes[i].GPUs {
			g := &m.Nodes[i].GPUs[j]
			kept, other := g.Users[:0], 0
			for _, u := range g.Users {
				if u.Other || !visible(u.Namespace) {
					other += u.Shares
					continue
				}
				kept = append(kept, u)
			}
			if other > 0 {
				kept = append(kept, Usage{Shares: other, Other: true})
			}
			g.Users = kept
			if len(g.Users) == 0 {
				g.Users = nil
			}
		}
	}
}
