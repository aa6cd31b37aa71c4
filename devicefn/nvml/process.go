package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

// maxUnreadableLogged bounds the PIDs remembered as logged unreadable.
const maxUnreadableLogged = 1024

// processes samples the SM utilisation of each process on g since the
// last sample (nvmlDeviceGetProcessUtilization) and maps the processes to
// the shares they hold through their environment (devicefn.EnvShareIDs).
// Compute processes without a sample report 0%. A GPU that cannot report
// per-process utilisation (MIG, old drivers) reports no processes; this
// never fails the GPU's sample.
func (s *Source) processes(g *gpu) []devicefn.ProcessUtil {
	samples, ret := g.dev.GetProcessUtilization(g.procSeen)
	switch {
	case ret == nvml.SUCCESS, ret == nvml.ERROR_NOT_FOUND: // NOT_FOUND: no sample since procSeen
	case unsupported(ret):
		return nil
	default:
		s.logger.Debug("cannot read per-process utilization", "gpu_uuid", g.uuid, "error", nvml.ErrorString(ret))
		return nil
	}
	sum, n := map[int]uint64{}, map[int]uint64{}
	for _, smp := range samples {
		pid := int(smp.Pid)
		sum[pid] += uint64(smp.SmUtil)
		n[pid]++
		g.procSeen = max(g.procSeen, smp.TimeStamp)
	}
	sm := make(map[int]uint32, len(sum))
	for pid, total := range sum {
		sm[pid] = uint32(min(total/n[pid], 100))
	}
	if running, ret := g.dev.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range running {
			if _, ok := sm[int(p.Pid)]; !ok {
				sm[int(p.Pid)] = 0
			}
		}
	}
	if len(sm) == 0 {
		return nil
	}
	holders, unreadable := s.procs.Holders(g.uuid, sm)
	for pid, err := range unreadable {
		if s.unreadable[pid] {
			continue
		}
		if len(s.unreadable) >= maxUnreadableLogged {
			clear(s.unreadable)
		}
		s.unreadable[pid] = true
		s.logger.Warn("cannot read a GPU process's environment to tell which shares it holds; run the plugin as root (as the Nomad client) to report its utilization",
			"gpu_uuid", g.uuid, "pid", pid, "error", err)
	}
	return holders
}
