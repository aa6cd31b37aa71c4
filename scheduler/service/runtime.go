package service

import (
	"slices"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// runtime is what the pin of d writes besides the pins: the configured
// run-time priority of opportunistic groups (config opportunistic block)
// and the sharing mode of the GPUs d chose, read from their nodes' device
// attributes. Sharing is "" when the GPUs differ or one is not found.
func (s *loop) runtime(d *placement.Decision) pin.Runtime {
	rt := pin.Runtime{}
	rt.ClientPriority, rt.ThreadScale = s.cfg.OpportunisticPriority()
	s.mu.Lock()
	defer s.mu.Unlock()
	first := true
	for _, p := range d.Placements {
		node := s.state.Nodes[p.Node]
		for _, uuid := range p.GPUs {
			sharing, perGPU := "", 0
			if node != nil && node.NodeResources != nil {
				for _, dev := range node.NodeResources.Devices {
					if dev == nil || dev.Vendor != devicefn.Vendor || dev.Type != devicefn.DeviceType {
						continue
					}
					g, err := nomadattr.DecodeGroup(dev)
					if err == nil && slices.ContainsFunc(g.GPUs, func(x devicefn.GroupGPU) bool { return x.UUID == uuid }) {
						sharing, perGPU = g.Sharing, g.SharesPerGPU
					}
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
