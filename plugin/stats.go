package plugin

import (
	"context"
	"maps"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/gpushare/gpushare/internal/nomadplugin/structs"
)

// Stats implements device.DevicePlugin: every share reports its GPU's
// utilisation, memory, power and temperature, and a share that a task's
// processes hold also the SM utilisation of those processes
// (StatProcessSM). A MIG instance, whole or its shares, reports its own
// memory and its parent's power and temperature (migDeviceStats).
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	out := make(chan *device.StatsResponse)
	go func() {
		defer close(out)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				timer.Reset(interval)
			}
			resp := p.statsOnce(ctx)
			if resp == nil {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case out <- resp:
			}
		}
	}()
	return out, nil
}

func (p *Plugin) statsOnce(ctx context.Context) *device.StatsResponse {
	cfg, src, err := p.config()
	if err != nil {
		return nil // the fingerprint loop reports the source error
	}
	samples, err := src.Stats(ctx)
	if err != nil {
		p.logger.Debug("failed to sample gpu stats", "error", err)
		return device.NewStatsError(err)
	}
	by := make(map[string]devicefn.Stats, len(samples))
	migBy := map[string]devicefn.MIGStats{}
	for _, s := range samples {
		by[s.UUID] = s
		for _, m := range s.MIGDevices {
			migBy[m.UUID] = m
		}
	}
	p.mu.Lock()
	groups, migGroups, shared := p.groups, p.migGroups, p.migShares
	index := map[string]int{} // NVML index by UUID, for per-GPU group names
	uuids := make([]string, 0, len(p.gpus))
	for uuid, st := range p.gpus {
		index[uuid] = st.gpu.Index
		uuids = append(uuids, uuid)
	}
	p.mu.Unlock()
	sliced := sliceStats(cfg.Interposer, uuids) // by share ID
	perGPU := cfg.DeviceGroups == devicefn.DeviceGroupsGPU

	resp := &device.StatsResponse{}
	for _, g := range groups {
		gs := &device.DeviceGroupStats{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: g.Model,
			InstanceStats: map[string]*device.DeviceStats{}}
		for _, gpu := range g.GPUs {
			if gpu.Parent != "" { // a shared MIG instance: no process of its own
				s, ok := by[gpu.Parent]
				if !ok {
					continue
				}
				ds := migDeviceStats(s, migBy[gpu.UUID], shared[gpu.UUID].MemoryMiB)
				for _, id := range devicefn.ShareIDs(gpu.UUID, g.GPUShares()) {
					gs.InstanceStats[id] = ds
				}
				continue
			}
			s, ok := by[gpu.UUID]
			if !ok {
				continue
			}
			into := gs
			if perGPU { // the GPU's own group
				into = &device.DeviceGroupStats{Vendor: devicefn.Vendor, Type: devicefn.DeviceType,
					Name: devicefn.GPUGroupName(g.Model, index[gpu.UUID]), InstanceStats: map[string]*device.DeviceStats{}}
				resp.Groups = append(resp.Groups, into)
			}
			gpuStats(into, s, gpu.UUID, cfg.SharesPerGPU, sliced)
		}
		if !perGPU || g.MIG != nil {
			resp.Groups = append(resp.Groups, gs)
		}
	}
	for _, g := range migGroups {
		gs := &device.DeviceGroupStats{Vendor: devicefn.Vendor, Type: devicefn.MIGDeviceType, Name: g.Profile,
			InstanceStats: map[string]*device.DeviceStats{}}
		for _, m := range g.Instances {
			if s, ok := by[m.Parent.UUID]; ok {
				gs.InstanceStats[m.UUID] = migDeviceStats(s, migBy[m.UUID], m.MemoryMiB)
			}
		}
		resp.Groups = append(resp.Groups, gs)
	}
	return resp
}

// gpuStats adds the stats of every share of a whole GPU to gs: the GPU's,
// for the shares a task's process holds, that process's too, and for those
// of a time-sliced task, its time-slicing (sliced, by share ID).
func gpuStats(gs *device.DeviceGroupStats, s devicefn.Stats, uuid string, sharesPerGPU int, sliced map[string]sliceMember) {
	ds := deviceStats(s)
	for _, id := range devicefn.ShareIDs(uuid, sharesPerGPU) {
		gs.InstanceStats[id] = ds
	}
	for _, proc := range s.Processes {
		held := withProcess(ds, proc)
		for _, id := range proc.Shares {
			if _, ok := gs.InstanceStats[id]; ok {
				gs.InstanceStats[id] = held
			}
		}
	}
	for _, id := range devicefn.ShareIDs(uuid, sharesPerGPU) {
		if m, ok := sliced[id]; ok {
			gs.InstanceStats[id] = withSlice(gs.InstanceStats[id], m)
		}
	}
}

// migDeviceStats is a MIG instance's stats: its own memory (m; when the
// source could not read it, totalMiB without use), its parent's power and
// temperature. NVML reports no utilisation of a MIG device: those stats
// are 0 and say so.
func migDeviceStats(parent devicefn.Stats, m devicefn.MIGStats, totalMiB uint64) *device.DeviceStats {
	s := parent
	s.UtilizationPct, s.MemoryUtilizationPct = 0, 0
	s.MemoryUsedMiB, s.MemoryTotalMiB = m.MemoryUsedMiB, m.MemoryTotalMiB
	if m.UUID == "" {
		s.MemoryUsedMiB, s.MemoryTotalMiB = 0, totalMiB
	}
	ds := deviceStats(s)
	a := ds.Stats.Attributes
	a[StatUtilization].Desc = migNoUtilization
	a[StatMemoryUtilization].Desc = migNoUtilization
	a[StatMemoryUsed].Desc = "MIG instance memory used"
	a[StatPower].Desc = "parent GPU power draw (all its MIG instances)"
	a[StatTemperature].Desc = "parent GPU temperature"
	return ds
}

// migNoUtilization describes a MIG instance's utilisation stats.
const migNoUtilization = "not reported per MIG instance (NVML has no utilisation of a MIG device): always 0"

// Stat names, as they appear in Nomad's client stats API.
const (
	StatUtilization       = "GPU utilization"
	StatMemoryUtilization = "Memory utilization"
	StatMemoryUsed        = "Memory used"
	StatPower             = "Power usage"
	StatTemperature       = "Temperature"
	// StatProcessSM is the share of time the GPU's SMs ran the kernels of
	// the processes that hold the share (the task's processes, found by
	// their GPUSHARE_SHARE_IDS), in percent of the whole GPU. Only shares
	// held by a process the source sees report it.
	StatProcessSM = "Process SM utilization"
)

// withProcess is a share's stats with its holder's SM utilisation.
func withProcess(gpu *device.DeviceStats, p devicefn.ProcessUtil) *device.DeviceStats {
	attrs := make(map[string]*structs.StatValue, len(gpu.Stats.Attributes)+1)
	maps.Copy(attrs, gpu.Stats.Attributes)
	pct, hundred := int64(p.SMUtilPct), int64(100)
	attrs[StatProcessSM] = &structs.StatValue{IntNumeratorVal: &pct, IntDenominatorVal: &hundred, Unit: "%",
		Desc: "share of time the GPU's SMs ran the kernels of the processes holding this share"}
	out := *gpu
	out.Stats = &structs.StatObject{Attributes: attrs}
	return &out
}

func deviceStats(s devicefn.Stats) *device.DeviceStats {
	i64 := func(v uint64) *int64 { x := int64(v); return &x }
	used, total := i64(s.MemoryUsedMiB), i64(s.MemoryTotalMiB)
	hundred := i64(100)
	return &device.DeviceStats{
		Summary: &structs.StatValue{IntNumeratorVal: used, IntDenominatorVal: total, Unit: structs.UnitMiB, Desc: StatMemoryUsed},
		Stats: &structs.StatObject{Attributes: map[string]*structs.StatValue{
			StatUtilization:       {IntNumeratorVal: i64(uint64(s.UtilizationPct)), IntDenominatorVal: hundred, Unit: "%", Desc: "share of time the GPU's SMs were busy"},
			StatMemoryUtilization: {IntNumeratorVal: i64(uint64(s.MemoryUtilizationPct)), IntDenominatorVal: hundred, Unit: "%", Desc: "share of time GPU memory was read or written"},
			StatMemoryUsed:        {IntNumeratorVal: used, IntDenominatorVal: total, Unit: structs.UnitMiB, Desc: "GPU memory used"},
			StatPower:             {IntNumeratorVal: i64(uint64(s.PowerWatts)), Unit: "W", Desc: "GPU power draw"},
			StatTemperature:       {IntNumeratorVal: i64(uint64(s.TemperatureC)), Unit: "C", Desc: "GPU temperature"},
		}},
		Timestamp: s.Timestamp,
	}
}
