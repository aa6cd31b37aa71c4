package service

import (
	"context"
	"github.com/gpushare/gpushare/devicefn"

	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
)

// sampleGPUs reads, every observe interval, the device stats of the
// nodes with gpushare devices, and records each GPU's stats and each
// job's utilisation in the history (/v1/gpus, /v1/history, the page).
// Every replica samples: a follower's page shows them too.
func (s *sampler) sampleGPUs(ctx context.Context) {
	s.c.mu.Lock()
	var nodes []string
	for id, n := range s.c.state.Nodes {
		if hasGPUShare(n) {
			nodes = append(nodes, id)
		}
	}
	type held struct {
		key       gpuhistory.JobKey
		id, group string
		shares    []string
	}
	var allocs []held
	for _, a := range s.c.state.Allocs {
		if !model.Live(a) || a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		if sh := model.Shares(a); len(sh) > 0 {
			allocs = append(allocs, held{gpuhistory.JobKey{Namespace: allocNamespace(a.Namespace), Job: a.JobID}, a.ID, a.TaskGroup, sh})
		}
	}
	s.c.mu.Unlock()

	round := gpuhistory.NewRound()
	for _, n := range nodes {
		stats, err := s.nomad.DeviceStats(ctx, n)
		if err != nil {
			s.log.Debug("cannot read the node's device stats", "node_id", n, "error", err)
			continue
		}
		round.Add(stats)
	}
	jobs := map[gpuhistory.JobKey]float64{}
	var sliced []gpuhistory.AllocTimeslice
	for _, a := range allocs {
		if v, ok := round.Use(a.shares); ok {
			jobs[a.key] += v
		}
		if ts, ok := round.Timeslice(a.shares); ok {
			sliced = append(sliced, gpuhistory.AllocTimeslice{Alloc: a.id, Namespace: a.key.Namespace, Job: a.key.Job, Group: a.group, Timeslice: ts})
		}
	}
	s.history.Record(s.now(), round.GPUs, jobs)
	s.history.SetTimeslices(sliced)
}

// hasGPUShare reports whether a node offers gpushare devices.
func hasGPUShare(n *api.Node) bool {
	if n == nil || n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d != nil && d.Vendor == devicefn.Vendor && (d.Type == devicefn.DeviceType || d.Type == devicefn.MIGDeviceType) {
			return true
		}
	}
	return false
}

func allocNamespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
