package service

import (
	"context"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// Stat names the plugin reports per share (plugin.StatUtilization and
// plugin.StatMemoryUtilization).
const (
	statSM  = "GPU utilization"
	statMem = "Memory utilization"
	// maxObservations bounds the samples kept per group.
	maxObservations = 60
)

// observations are the samples of groups running alone, by group key
// (pin.GroupKey), at most maxObservations each, from which their
// interference profiles are learned. The model's lock (cluster.mu) guards
// them: observe adds under it, and the records forget the groups gone
// under it (forgetGone).
type observations map[string][]interference.Observation

// add keeps obs of group key, dropping its oldest beyond maxObservations,
// and returns the group's samples. The caller holds the model's lock.
func (o observations) add(key string, obs interference.Observation) []interference.Observation {
	list := append(o[key], obs)
	if len(list) > maxObservations {
		list = list[len(list)-maxObservations:]
	}
	o[key] = list
	return list
}

// forget drops the samples of the groups not wanted. The caller holds the
// model's lock.
func (o observations) forget(wanted map[string]bool) {
	for id := range o {
		if !wanted[id] {
			delete(o, id)
		}
	}
}

// observe samples the device stats of allocations that run alone on their
// GPUs and learns each group's interference profile from them, for groups
// that declare none. Samples of shared GPUs are skipped: they measure the
// sum of several jobs.
func (s *loop) observe(ctx context.Context) {
	if s.lease.follows() {
		return // the leader samples; the others read what it learned
	}
	type target struct {
		id, key, node string
		shares        map[string]bool
	}
	s.mu.Lock()
	users := map[string]int{} // GPU UUID -> live allocations on it
	for _, a := range s.state.Allocs {
		if !model.Live(a) {
			continue
		}
		for u := range gpusOf(a) {
			users[u]++
		}
	}
	var targets []target
	for _, a := range s.state.Allocs {
		if !model.Live(a) || a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		gpus := gpusOf(a)
		if len(gpus) == 0 {
			continue
		}
		alone := true
		for u := range gpus {
			alone = alone && users[u] == 1
		}
		job := s.state.Jobs[model.JobKey(a.Namespace, a.JobID)]
		if !alone || job == nil {
			continue
		}
		if r, err := pin.Request(job, a.TaskGroup, s.profile); err != nil || r.Profile.Known() {
			continue // declared profiles win
		}
		shares := map[string]bool{}
		for _, sh := range model.Shares(a) {
			shares[sh] = true
		}
		targets = append(targets, target{id: a.ID, key: pin.GroupKey(job, a.TaskGroup), node: a.NodeID, shares: shares})
	}
	s.mu.Unlock()
	s.log.Trace("sampling device stats of allocations running alone", "allocations", len(targets))

	byNode := map[string][]*api.DeviceGroupStats{}
	for _, t := range targets {
		stats := s.deviceStats(ctx, byNode, t.node)
		obs, ok := observation(stats, t.shares)
		if !ok {
			s.log.Trace("no gpushare device stats for allocation yet", "alloc_id", t.id)
			continue
		}
		s.mu.Lock()
		list := s.observations.add(t.key, obs)
		if p, ok := interference.Learn(list); ok {
			p.Name = "learned"
			if _, had := s.state.Learned[t.key]; !had {
				s.log.Info("learned an interference profile from a group running alone", "group", t.key, "sm_util", p.SM, "mem_bw", p.MemBW)
			}
			key := t.key
			s.write(func() { s.state.Learn(key, p) })
		}
		s.mu.Unlock()
	}
}

// observation averages the plugin's stats of an allocation's shares.
func observation(groups []*api.DeviceGroupStats, shares map[string]bool) (interference.Observation, bool) {
	var o interference.Observation
	n := 0
	for _, g := range groups {
		if g.Vendor != devicefn.Vendor || g.Type != devicefn.DeviceType {
			continue
		}
		for id, st := range g.InstanceStats {
			if !shares[id] || st == nil || st.Stats == nil {
				continue
			}
			sm, ok1 := pct(st.Stats.Attributes[statSM])
			mem, ok2 := pct(st.Stats.Attributes[statMem])
			if !ok1 || !ok2 {
				continue
			}
			o.SMUtilPct += sm
			o.MemUtilPct += mem
			n++
		}
	}
	if n == 0 {
		return o, false
	}
	o.SMUtilPct /= float64(n)
	o.MemUtilPct /= float64(n)
	return o, true
}

func pct(v *api.StatValue) (float64, bool) {
	if v == nil {
		return 0, false
	}
	switch {
	case v.IntNumeratorVal != nil:
		return float64(*v.IntNumeratorVal), true
	case v.FloatNumeratorVal != nil:
		return *v.FloatNumeratorVal, true
	}
	return 0, false
}

func gpusOf(a *api.Allocation) map[string]bool {
	out := map[string]bool{}
	for _, sh := range model.Shares(a) {
		if id, err := devicefn.ParseShareID(sh); err == nil {
			out[id.UUID] = true
		}
	}
	return out
}

// every calls f every interval until ctx ends (the sampling loops of
// learned profiles and of introspection).
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// deviceStats reads a node's device stats once per sampling round (byNode
// keeps them); a node whose stats cannot be read has none.
func (s *loop) deviceStats(ctx context.Context, byNode map[string][]*api.DeviceGroupStats, node string) []*api.DeviceGroupStats {
	stats, ok := byNode[node]
	if !ok {
		var err error
		if stats, err = s.nomad.DeviceStats(ctx, node); err != nil {
			s.log.Debug("cannot read the node's device stats", "node_id", node, "error", err)
		}
		byNode[node] = stats
	}
	return stats
}
