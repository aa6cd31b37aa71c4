package service

import (
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// runtimes reads what a pin writes besides the pins from the
// configuration and the nodes' device groups, which it decodes once per
// node object (deviceGroups). Its decoded nodes are guarded by the
// model's lock.
type runtimes struct {
	c       *cluster
	cfg     *config.Config
	decoded map[string]decodedNode
}

// of is what the pin of d writes besides the pins: the configured
// run-time priority of opportunistic groups (config opportunistic block),
// the quantum of time-sliced ones (config timeslice block)
// and the sharing mode of the GPUs d chose, read from their nodes' device
// attributes. Sharing is "" when the GPUs differ or one is not found.
func (s *runtimes) of(d *placement.Decision) pin.Runtime {
	rt := pin.Runtime{}
	rt.ClientPriority, rt.ThreadScale = s.cfg.OpportunisticPriority()
	rt.TimesliceQuantum = s.cfg.TimesliceQuantum()
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	first := true
	for _, p := range d.Placements {
		groups := s.deviceGroups(s.c.state.Nodes[p.Node])
		for _, uuid := range p.GPUs {
			sharing, perGPU := "", 0
			for _, g := range groups {
				if slices.ContainsFunc(g.GPUs, func(x devicefn.GroupGPU) bool { return x.UUID == uuid }) {
					sharing, perGPU = g.Sharing, g.SharesPerGPU
				}
			}
			if first {
				rt.Sharing, rt.SharesPerGPU, first = sharing, perGPU, false
			} else if sharing != rt.Sharing || perGPU != rt.SharesPerGPU {
				rt.Sharing = ""
			}
		}
	}
	return rt
}

// decodedNode is a node's gpushare device groups, decoded from the node
// object they were read from.
type decodedNode struct {
	node   *api.Node
	groups []*devicefn.Group
}

// deviceGroups decodes node's gpushare device groups once per node
// object (an update of the node is a new object in the model): every pin
// reads them, and a pass may send thousands. The caller holds the
// model's lock.
func (s *runtimes) deviceGroups(node *api.Node) []*devicefn.Group {
	if node == nil || node.NodeResources == nil {
		return nil
	}
	if d, ok := s.decoded[node.ID]; ok && d.node == node {
		return d.groups
	}
	if s.decoded == nil || len(s.decoded) > 2*len(s.c.state.Nodes)+64 {
		s.decoded = map[string]decodedNode{} // drop the nodes gone
	}
	var groups []*devicefn.Group
	for _, dev := range node.NodeResources.Devices {
		if dev == nil || dev.Vendor != devicefn.Vendor || dev.Type != devicefn.DeviceType {
			continue
		}
		if g, err := nomadattr.DecodeGroup(dev); err == nil {
			groups = append(groups, g)
		}
	}
	s.decoded[node.ID] = decodedNode{node: node, groups: groups}
	return groups
}
