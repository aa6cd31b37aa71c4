package gpumap

import (
	"maps"
	"sort"
	"time"

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
	// MIG is how the node's MIG instances are offered: devicefn.MIGWhole
	// (Sharing "mig", counted in slices) or devicefn.MIGShared (each
	// instance shares of its own, counted in shares of its parent); ""
	// for GPUs without MIG.
	MIG string `json:"mig,omitempty"`
	// PerGPU: the plugin offers each GPU as a device group of its own
	// (device_groups = "gpu"), merged here by model.
	PerGPU bool `json:"per_gpu,omitempty"`
	// MPSDaemon is what the plugin says of its MPS control daemon with
	// Sharing "mps" (the device group attribute mps_daemon,
	// plugin.AttrMPSDaemon): "running", or what is wrong (then tasks run
	// time-sliced, without MPS); "" when the plugin does not say.
	MPSDaemon string `json:"mps_daemon,omitempty"`
}

// attrMPSDaemon is the device group attribute plugin.AttrMPSDaemon.
const attrMPSDaemon = "mps_daemon"

// mpsRunning is its value when the daemon answers.
const mpsRunning = "running"

// MPSMissing reports whether the node shares its GPUs with MPS but the
// plugin says its MPS daemon is not there: tasks are time-sliced.
func (n Node) MPSMissing() bool {
	return n.Sharing == devicefn.SharingMPS && n.MPSDaemon != "" && n.MPSDaemon != mpsRunning
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
	// MIG are the instances of a GPU in MIG mode. Offered whole (Node.MIG
	// "whole", Sharing "mig"), its Shares and Used count compute slices and
	// Users hold slices; shared (Node.MIG "shared"), they are the shares
	// its instances offer and their users hold.
	MIG []Instance `json:"mig,omitempty"`
	// Stats are the GPU's latest counters, as its device plugin reported
	// them to Nomad; nil when the scheduler has read none yet (WithStats).
	Stats *Stats `json:"stats,omitempty"`
}

// Stats are a GPU's counters at one time, as the device plugin reports
// them on each of its shares (plugin.Stat*).
type Stats struct {
	// At is when the scheduler read them.
	At time.Time `json:"at"`
	// UtilizationPct is the share of time the GPU's SMs were busy.
	UtilizationPct float64 `json:"utilization_pct"`
	// MemoryUtilizationPct is the share of time its memory was read or
	// written.
	MemoryUtilizationPct float64 `json:"memory_utilization_pct"`
	MemoryUsedMiB        uint64  `json:"memory_used_mib"`
	MemoryTotalMiB       uint64  `json:"memory_total_mib"`
	PowerW               float64 `json:"power_w"`
	TemperatureC         float64 `json:"temperature_c"`
}

// WithStats sets each GPU's Stats to what latest has of its UUID.
func (m *Map) WithStats(latest func(uuid string) (Stats, bool)) {
	for i := range m.Nodes {
		for j := range m.Nodes[i].GPUs {
			g := &m.Nodes[i].GPUs[j]
			if st, ok := latest(g.UUID); ok {
				g.Stats = &st
			}
		}
	}
}

// Instance is one MIG instance of a GPU and the allocation holding it.
type Instance struct {
	UUID      string  `json:"uuid"`
	Profile   string  `json:"profile"`
	Slices    int     `json:"slices"`
	MemoryMiB uint64  `json:"memory_mib"`
	Healthy   bool    `json:"healthy"`
	Health    string  `json:"health,omitempty"`
	Users     []Usage `json:"users,omitempty"`
	// Shares an instance shared further offers (in shares of its parent)
	// and Used of them; 0 for an instance offered whole.
	Shares int `json:"shares,omitempty"`
	Used   int `json:"used,omitempty"`
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
		shared := sharedMIG{node: n}
		health := map[string]*api.NodeDevice{}
		mpsDaemon := "" // the plugin's MPS daemon: one per node
		for _, d := range n.NodeResources.Devices {
			if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.DeviceType {
				maps.Copy(health, shareHealth(d))
				if a := d.Attributes[attrMPSDaemon]; a != nil && a.StringVal != nil && (mpsDaemon == "" || mpsDaemon == mpsRunning) {
					mpsDaemon = *a.StringVal // what is wrong, if any group says so
				}
			}
		}
		// per-GPU groups (device_groups = "gpu") merged back by model
		groups, errs := nomadattr.DecodeGroups(n.NodeResources.Devices)
		for _, err := range errs {
			m.Problems = append(m.Problems, "node "+n.Name+": "+err.Error())
		}
		for gi := range groups {
			g := &groups[gi]
			if g.MIG != nil {
				shared.add(g, health)
				continue
			}
			node := Node{ID: n.ID, Name: n.Name, Status: n.Status, Model: g.Model, Sharing: g.Sharing, SharesPerGPU: g.SharesPerGPU, PerGPU: g.PerGPU}
			if g.Sharing == devicefn.SharingMPS {
				node.MPSDaemon = mpsDaemon
			}
			for i, gpu := range g.GPUs {
				out := GPU{Index: i, UUID: gpu.UUID, NUMANode: gpu.NUMANode, Links: devicefn.EncodeRow(gpu.Links), Shares: g.SharesPerGPU, Healthy: true}
				if inst := health[gpu.UUID]; inst != nil {
					out.Healthy, out.Health = inst.Healthy, inst.HealthDescription
				}
				node.GPUs = append(node.GPUs, out)
			}
			m.Nodes = append(m.Nodes, node)
		}
		m.Nodes = append(m.Nodes, shared.nodes()...)
		m.addMIG(n)
	}
	sort.Slice(m.Nodes, func(i, j int) bool {
		if m.Nodes[i].Name != m.Nodes[j].Name {
			return m.Nodes[i].Name < m.Nodes[j].Name
		}
		if m.Nodes[i].Model != m.Nodes[j].Model {
			return m.Nodes[i].Model < m.Nodes[j].Model
		}
		return migRank(m.Nodes[i]) < migRank(m.Nodes[j])
	})
	type instanceAt struct {
		gpu *GPU
		k   int
	}
	instances := map[string]instanceAt{} // MIG UUID -> its GPU and index
	for i := range m.Nodes {
		for j := range m.Nodes[i].GPUs {
			g := &m.Nodes[i].GPUs[j]
			where[g.UUID] = g
			for k, inst := range g.MIG {
				instances[inst.UUID] = instanceAt{g, k}
			}
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
				if d != nil && d.Vendor == devicefn.Vendor && d.Type == devicefn.MIGDeviceType {
					for _, id := range d.DeviceIDs {
						if at, ok := instances[id]; ok {
							u := usage(a, at.gpu.MIG[at.k].Slices)
							at.gpu.MIG[at.k].Users = append(at.gpu.MIG[at.k].Users, u)
							at.gpu.Used += u.Shares
							at.gpu.Users = append(at.gpu.Users, u)
						}
					}
					continue
				}
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
			if at, ok := instances[uuid]; ok && at.gpu.MIG[at.k].Shares > 0 { // a shared instance
				u := usage(a, n)
				inst := &at.gpu.MIG[at.k]
				inst.Used += n
				inst.Users = append(inst.Users, u)
				at.gpu.Used += n
				at.gpu.Users = append(at.gpu.Users, u)
				continue
			}
			g := where[uuid]
			if g == nil {
				continue
			}
			g.Used += n
			g.Users = append(g.Users, usage(a, n))
		}
	}
	for _, g := range where {
		sort.Slice(g.Users, func(i, j int) bool { return g.Users[i].AllocID < g.Users[j].AllocID })
		for k := range g.MIG {
			us := g.MIG[k].Users
			sort.Slice(us, func(i, j int) bool { return us[i].AllocID < us[j].AllocID })
		}
	}
	return m
}

func usage(a *api.Allocation, shares int) Usage {
	ns := a.Namespace
	if ns == "" {
		ns = "default"
	}
	return Usage{AllocID: a.ID, Namespace: ns, Job: a.JobID, Group: a.TaskGroup, Shares: shares}
}

// addMIG adds the MIG-enabled GPUs of node n, with their instances, as
// one Node per parent model with sharing "mig".
func (m *Map) addMIG(n *api.Node) {
	byParent := map[string]*GPU{}
	models := map[string]string{} // parent UUID -> model
	for _, d := range n.NodeResources.Devices {
		if d == nil || d.Vendor != devicefn.Vendor || d.Type != devicefn.MIGDeviceType {
			continue
		}
		g, err := nomadattr.DecodeMIGGroup(d)
		if err != nil {
			m.Problems = append(m.Problems, "node "+n.Name+": "+err.Error())
			continue
		}
		health := map[string]*api.NodeDevice{}
		for _, inst := range d.Instances {
			if inst != nil {
				health[inst.ID] = inst
			}
		}
		for _, inst := range g.Instances {
			p := byParent[inst.Parent.UUID]
			if p == nil {
				p = &GPU{Index: inst.Parent.Index, UUID: inst.Parent.UUID, NUMANode: inst.Parent.NUMANode,
					Links: devicefn.EncodeRow(inst.ParentLinks), Shares: inst.ParentSlices, Healthy: true}
				byParent[inst.Parent.UUID] = p
				models[inst.Parent.UUID] = inst.Parent.Model
			}
			out := Instance{UUID: inst.UUID, Profile: inst.Profile, Slices: inst.Slices, MemoryMiB: inst.MemoryMiB, Healthy: true}
			if h := health[inst.UUID]; h != nil {
				out.Healthy, out.Health = h.Healthy, h.HealthDescription
				if !h.Healthy && p.Healthy {
					p.Healthy, p.Health = false, h.HealthDescription
				}
			}
			p.MIG = append(p.MIG, out)
		}
	}
	byModel := map[string]*Node{}
	var order []string
	for uuid, g := range byParent {
		sort.Slice(g.MIG, func(i, j int) bool {
			if g.MIG[i].Slices != g.MIG[j].Slices {
				return g.MIG[i].Slices > g.MIG[j].Slices
			}
			return g.MIG[i].UUID < g.MIG[j].UUID
		})
		model := models[uuid]
		node := byModel[model]
		if node == nil {
			node = &Node{ID: n.ID, Name: n.Name, Status: n.Status, Model: model, Sharing: devicefn.SharingMIG, MIG: devicefn.MIGWhole}
			byModel[model] = node
			order = append(order, model)
		}
		node.GPUs = append(node.GPUs, *g)
	}
	sort.Strings(order)
	for _, model := range order {
		node := byModel[model]
		sort.Slice(node.GPUs, func(i, j int) bool { return node.GPUs[i].Index < node.GPUs[j].Index })
		m.Nodes = append(m.Nodes, *node)
	}
}

// Hide replaces, on every GPU, the usage of the namespaces visible does
// not accept by one anonymous usage of their shares (Other): the reader
// sees that the shares are used, not by which job, group or allocation.
func (m *Map) Hide(visible func(namespace string) bool) {
	for i := range m.Nodes {
		for j := range m.Nodes[i].GPUs {
			g := &m.Nodes[i].GPUs[j]
			g.Users = hide(g.Users, visible)
			for k := range g.MIG {
				g.MIG[k].Users = hide(g.MIG[k].Users, visible)
			}
		}
	}
}

func hide(users []Usage, visible func(namespace string) bool) []Usage {
	kept, other := users[:0], 0
	for _, u := range users {
		if u.Other || !visible(u.Namespace) {
			other += u.Shares
			continue
		}
		kept = append(kept, u)
	}
	if other > 0 {
		kept = append(kept, Usage{Shares: other, Other: true})
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}
