package service

import (
	"context"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
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

// sampler reads the GPUs' device stats on a ticker of its own (Service's
// Run), beside the decision loop: every replica records each GPU's and
// each job's use in the history (sampleGPUs, gpustats.go), and the leader
// keeps the samples of groups running alone, from which it learns their
// profiles (observe), and introspection's samples of allocations alone
// or sharing a GPU (introspectSample). It reads the model under its lock and writes what it
// learned through it (cluster.write).
type sampler struct {
	c       *cluster
	nomad   statsReader
	lease   follower
	profile *interference.Model
	log     hclog.Logger
	now     func() time.Time
	// history is the GPUs' and jobs' use (it locks itself; the view and
	// the figures read it); observations the samples of groups running
	// alone, under the model's lock
	history      *gpuhistory.Store
	observations observations
	// intro keeps the samples of allocations alone or sharing a GPU
	// (introspect.go; it locks itself), which introspectSample reads
	// leaving out the allocations being stopped for a preemption
	// (preempted, the loop's, under the model's lock)
	intro     *introspection
	preempted *stopping
}

// statsReader reads a node's device stats from Nomad.
type statsReader interface {
	DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error)
}

// follower says whether this replica campaigns and does not lead.
type follower interface {
	follows() bool
}

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
func (s *sampler) observe(ctx context.Context) {
	if s.lease.follows() {
		return // the leader samples; the others read what it learned
	}
	type target struct {
		id, key, node string
		shares        map[string]bool
	}
	s.c.mu.Lock()
	users := map[string]int{} // GPU UUID -> live allocations on it
	for _, a := range s.c.state.Allocs {
		if !model.Live(a) {
			continue
		}
		for u := range gpusOf(a) {
			users[u]++
		}
	}
	var targets []target
	for _, a := range s.c.state.Allocs {
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
		job := s.c.state.Jobs[model.JobKey(a.Namespace, a.JobID)]
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
	s.c.mu.Unlock()
	s.log.Trace("sampling device stats of allocations running alone", "allocations", len(targets))

	byNode := map[string][]*api.DeviceGroupStats{}
	for _, t := range targets {
		stats := deviceStatsOnce(ctx, s.nomad, s.log, byNode, t.node)
		obs, ok := observation(stats, t.shares)
		if !ok {
			s.log.Trace("no gpushare device stats for allocation yet", "alloc_id", t.id)
			continue
		}
		s.c.mu.Lock()
		list := s.observations.add(t.key, obs)
		if p, ok := interference.Learn(list); ok {
			p.Name = "learned"
			if _, had := s.c.state.Learned[t.key]; !had {
				s.log.Info("learned an interference profile from a group running alone", "group", t.key, "sm_util", p.SM, "mem_bw", p.MemBW)
			}
			key := t.key
			s.c.write(func() { s.c.state.Learn(key, p) })
		}
		s.c.mu.Unlock()
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

// deviceStatsOnce reads a node's device stats through n once per
// sampling round (byNode keeps them); a node whose stats cannot be read
// has none.
func deviceStatsOnce(ctx context.Context, n statsReader, log hclog.Logger, byNode map[string][]*api.DeviceGroupStats, node string) []*api.DeviceGroupStats {
	stats, ok := byNode[node]
	if !ok {
		var err error
		if stats, err = n.DeviceStats(ctx, node); err != nil {
			log.Debug("cannot read the node's device stats", "node_id", node, "error", err)
		}
		byNode[node] = stats
	}
	return stats
}
