package nvml

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpushare/gpushare/devicefn"
)

// ReasonGPULost is the health reason of a GPU that NVML reports lost.
const ReasonGPULost = "GPU is lost (NVML ERROR_GPU_IS_LOST)"

// maxEventsPerPoll bounds how many events one Health call drains, so that
// an event storm cannot hold the source forever.
const maxEventsPerPoll = 1024

// xidDescriptions are short descriptions of well-known XIDs, after
// NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors).
var xidDescriptions = map[uint64]string{
	13:  "Graphics Engine Exception",
	31:  "GPU memory page fault",
	32:  "Invalid or corrupted push buffer stream",
	38:  "Driver firmware error",
	43:  "GPU stopped processing",
	45:  "Preemptive cleanup, due to previous errors",
	48:  "Double Bit ECC Error",
	61:  "Internal micro-controller breakpoint/warning",
	62:  "Internal micro-controller halt",
	63:  "ECC page retirement or row remapping recording event",
	64:  "ECC page retirement or row remapper recording failure",
	68:  "Video processor exception",
	69:  "Graphics Engine class error",
	74:  "NVLink Error",
	79:  "GPU has fallen off the bus",
	92:  "High single-bit ECC error rate",
	94:  "Contained ECC error",
	95:  "Uncontained ECC error",
	109: "Context Switch Timeout Error",
	119: "GSP RPC Timeout",
	120: "GSP Error",
	140: "Unrecovered ECC Error",
}

// xidReason is the health reason for a critical XID.
func xidReason(xid uint64) string {
	desc, ok := xidDescriptions[xid]
	if !ok {
		desc = "critical error (see NVIDIA's XID catalogue)"
	}
	return fmt.Sprintf("XID %d: %s", xid, desc)
}

// registerEvents creates the event set and registers every GPU for
// critical XIDs. A GPU that cannot deliver them is logged (once, as this
// runs once per init) and still checked by queries. It returns nil when no
// GPU delivers XIDs.
func (s *Source) registerEvents(gpus []*gpu) nvml.EventSet {
	if len(gpus) == 0 {
		return nil
	}
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		s.logger.Warn("cannot create NVML event set; XID health checks are off", "error", ret)
		return nil
	}
	registered := 0
	for _, g := range gpus {
		ret := g.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		switch {
		case ret == nvml.SUCCESS:
			registered++
		case unsupported(ret):
			s.logger.Info("no XID events from GPU; checking its health by queries only",
				"gpu_index", g.index, "gpu_uuid", g.uuid)
		default:
			s.logger.Warn("cannot register GPU for XID events; checking its health by queries only",
				"gpu_index", g.index, "gpu_uuid", g.uuid, "error", ret)
		}
	}
	if registered == 0 {
		if ret := set.Free(); ret != nvml.SUCCESS {
			s.logger.Debug("cannot free unused NVML event set", "error", ret)
		}
		return nil
	}
	return set
}

// Health implements devicefn.Source. It drains the pending XID events,
// then probes each GPU (handle by UUID, then memory info). A GPU is
// unhealthy while NVML reports it lost or cannot query it, and from a
// critical XID until XIDRecovery has passed without another one. Health
// is reported for every GPU, MIG-enabled ones included, in index order.
func (s *Source) Health(ctx context.Context) (_ []devicefn.Health, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.recoverPanic("health", &err)
	if err := s.ensure(); err != nil {
		return nil, err
	}
	s.drainEvents(ctx)

	out := make([]devicefn.Health, 0, len(s.gpus))
	for _, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		reason := s.gpuHealth(g)
		if reason != g.reported {
			if reason == "" {
				s.logger.Info("marking GPU healthy again", "gpu_index", g.index, "gpu_uuid", g.uuid, "was", g.reported)
			} else {
				s.logger.Warn("marking GPU unhealthy", "gpu_index", g.index, "gpu_uuid", g.uuid, "reason", reason)
			}
			g.reported = reason
		}
		out = append(out, devicefn.Health{UUID: g.uuid, Healthy: reason == "", Reason: reason})
	}
	return out, nil
}

// drainEvents reads the pending events without blocking.
func (s *Source) drainEvents(ctx context.Context) {
	if s.events == nil {
		return
	}
	for range maxEventsPerPoll {
		if ctx.Err() != nil {
			return
		}
		data, ret := s.events.Wait(0)
		switch ret {
		case nvml.SUCCESS:
			s.handleEvent(data)
		case nvml.ERROR_TIMEOUT:
			return
		default:
			s.logger.Debug("cannot read NVML events", "error", ret)
			return
		}
	}
	s.logger.Warn("too many NVML events at once; reading the rest on the next health check", "events", maxEventsPerPoll)
}

// handleEvent records a critical XID against its GPU. If NVML does not
// say which GPU raised it, every GPU is suspect, as in k8s-device-plugin.
func (s *Source) handleEvent(data nvml.EventData) {
	if data.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	xid := data.EventData
	uuid, known := eventUUID(data.Device)
	if s.ignoredXIDs[xid] {
		s.logger.Info("ignoring application XID", "gpu_uuid", uuid, "xid", xid, "reason", xidReason(xid))
		return
	}
	targets := s.gpus
	if known {
		targets = nil
		for _, g := range s.gpus {
			if g.uuid == uuid {
				targets = append(targets, g)
			}
		}
		if len(targets) == 0 {
			s.logger.Debug("critical XID from a GPU this source does not track", "gpu_uuid", uuid, "xid", xid)
		}
	} else {
		s.logger.Warn("cannot tell which GPU raised a critical XID; suspecting all of them", "xid", xid)
	}
	now := s.now()
	for _, g := range targets {
		s.logger.Warn("received critical XID", "gpu_index", g.index, "gpu_uuid", g.uuid, "xid", xid, "reason", xidReason(xid))
		g.xid, g.xidAt = xid, now
	}
}

// eventUUID returns the UUID of the GPU that raised an event, if NVML says.
func eventUUID(dev nvml.Device) (string, bool) {
	if dev == nil {
		return "", false
	}
	uuid, ret := dev.GetUUID()
	return uuid, ret == nvml.SUCCESS
}

// gpuHealth returns why g is unhealthy, or "" when it is healthy, and
// clears an XID whose recovery time has passed.
func (s *Source) gpuHealth(g *gpu) string {
	dev, ret := s.lib.DeviceGetHandleByUUID(g.uuid)
	if ret == nvml.SUCCESS {
		if _, ret = dev.GetMemoryInfo(); unsupported(ret) {
			ret = nvml.SUCCESS
		}
	}
	switch {
	case ret == nvml.ERROR_GPU_IS_LOST:
		return ReasonGPULost
	case ret != nvml.SUCCESS:
		return fmt.Sprintf("NVML cannot query the GPU: %v", ret)
	}
	if g.xidAt.IsZero() {
		return ""
	}
	if s.xidRecovery >= 0 && s.now().Sub(g.xidAt) >= s.xidRecovery {
		g.xid, g.xidAt = 0, time.Time{}
		return ""
	}
	return xidReason(g.xid)
}
