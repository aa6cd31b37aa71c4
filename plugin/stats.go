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
// (StatProcessSM).
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
	for _, s := range samples {
		by[s.UUID] = s
	}
	p.mu.Lock()
	groups := p.groups
	p.mu.Unlock()

	resp := &device.StatsResponse{}
	for _, g := range groups {
		gs := &device.DeviceGroupStats{Vendor: devicefn.Vendor, Type: devicefn.DeviceType, Name: g.Model,
			InstanceStats: map[string]*device.DeviceStats{}}
		for _, gpu := range g.GPUs {
			s, ok := by[gpu.UUID]
			if !ok {
				continue
			}
			ds := deviceStats(s)
			for _, id := range devicefn.ShareIDs(gpu.UUID, cfg.SharesPerGPU) {
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
		}
		resp.Groups = append(resp.Groups, gs)
	}
	return resp
}

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
