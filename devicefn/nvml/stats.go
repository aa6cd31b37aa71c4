package nvml

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

// Stats implements devicefn.Source. Counters a GPU does not support (power
// on some boards, utilisation in MIG mode) are left zero; a MIG-enabled
// GPU's MIG devices report their memory (Stats.MIGDevices). A GPU that NVML
// cannot sample at all, for example a lost one, is left out of the result;
// Health says why.
func (s *Source) Stats(ctx context.Context) (_ []devicefn.Stats, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.recoverPanic("stats", &err)
	if err := s.ensure(); err != nil {
		return nil, err
	}
	out := make([]devicefn.Stats, 0, len(s.gpus))
	for _, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		st, err := s.sample(g)
		if err != nil {
			s.logger.Debug("cannot sample GPU; leaving it out of the stats", "gpu_index", g.index, "gpu_uuid", g.uuid, "error", err)
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

func (s *Source) sample(g *gpu) (devicefn.Stats, error) {
	st := devicefn.Stats{UUID: g.uuid}

	util, ret := g.dev.GetUtilizationRates()
	switch {
	case ret == nvml.SUCCESS:
		st.UtilizationPct, st.MemoryUtilizationPct = util.Gpu, util.Memory
	case !unsupported(ret):
		return st, gpuErr(g, "read utilization", ret)
	}

	mem, ret := g.dev.GetMemoryInfo()
	switch {
	case ret == nvml.SUCCESS:
		st.MemoryUsedMiB, st.MemoryTotalMiB = mem.Used/mib, mem.Total/mib
	case !unsupported(ret):
		return st, gpuErr(g, "read memory", ret)
	}

	milliwatts, ret := g.dev.GetPowerUsage()
	switch {
	case ret == nvml.SUCCESS:
		st.PowerWatts = (milliwatts + 500) / 1000
	case !unsupported(ret):
		return st, gpuErr(g, "read power usage", ret)
	}

	temp, ret := g.dev.GetTemperature(nvml.TEMPERATURE_GPU)
	switch {
	case ret == nvml.SUCCESS:
		st.TemperatureC = temp
	case !unsupported(ret):
		return st, gpuErr(g, "read temperature", ret)
	}

	st.Processes = s.processes(g)
	if mode, _, ret := g.dev.GetMigMode(); ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE {
		st.MIGDevices = s.sampleMIG(g)
	}
	st.Timestamp = s.now()
	return st, nil
}

// sampleMIG reads the memory of a MIG-enabled GPU's MIG devices through
// their handles. A device NVML cannot read is left out (the plugin then
// reports its memory total without use); NVML has no utilisation of a MIG
// device, nor per-process utilisation on it.
func (s *Source) sampleMIG(g *gpu) []devicefn.MIGStats {
	count, ret := g.dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []devicefn.MIGStats
	for i := range count {
		mig, ret := g.dev.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // no MIG device in this slot
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		mem, ret := mig.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			s.logger.Debug("cannot read a MIG device's memory; leaving it out of the stats", "gpu_uuid", g.uuid, "mig_device", uuid, "error", ret)
			continue
		}
		out = append(out, devicefn.MIGStats{UUID: uuid, MemoryUsedMiB: mem.Used / mib, MemoryTotalMiB: mem.Total / mib})
	}
	return out
}
