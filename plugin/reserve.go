package plugin

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
)

// Reservation errors; every refusal wraps one of them and names the IDs,
// the GPUs and the rule.
var (
	ErrUnknownShare     = errors.New("unknown share IDs")
	ErrUnhealthyShare   = errors.New("shares of unhealthy GPUs")
	ErrSplitFraction    = errors.New("a fraction of a GPU must be on one GPU")
	ErrPartialGPU       = errors.New("a request of shares_per_gpu or more shares must be whole GPUs")
	ErrExclusive        = errors.New("sharing = \"exclusive\" hands out whole GPUs only")
	ErrDuplicateShare   = errors.New("share IDs requested twice")
	ErrEmptyReservation = errors.New("no share IDs requested")
)

// Environment variables set by Reserve.
const (
	EnvNvidiaVisible   = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisible     = "CUDA_VISIBLE_DEVICES"
	EnvShares          = "GPUSHARE_SHARES"
	EnvShareIDs        = devicefn.EnvShareIDs
	EnvSharesPerGPU    = "GPUSHARE_SHARES_PER_GPU"
	EnvFraction        = "GPUSHARE_FRACTION"
	EnvShareMemory     = "GPUSHARE_MEMORY_MIB"
	EnvSharing         = "GPUSHARE_SHARING"
	EnvMPSPipe         = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSLog          = "CUDA_MPS_LOG_DIRECTORY"
	EnvMPSThreads      = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPinnedMemory = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// controlDevices are the device nodes every CUDA task needs besides its
// GPUs' own /dev/nvidia<minor>.
var controlDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Reserve implements device.DevicePlugin. It refuses unknown or unhealthy
// share IDs, a fraction spread over several GPUs, and a request of
// shares_per_gpu or more shares that is not made of whole GPUs. A request
// for MIG instances is reserveMIG's.
func (p *Plugin) Reserve(ids []string) (*device.ContainerReservation, error) {
	p.mu.Lock()
	cfg, gpus, migs := p.cfg, p.gpus, p.migs
	p.mu.Unlock()
	if cfg == nil {
		return nil, errors.New("gpushare plugin asked to reserve before SetConfig")
	}
	if len(ids) == 0 {
		return nil, ErrEmptyReservation
	}
	if isMIGRequest(ids, migs) {
		return p.reserveMIG(ids, gpus, migs)
	}
	perGPU := cfg.SharesPerGPU

	// unknown and duplicate IDs
	byGPU := map[string][]int{}
	var unknown, dups []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			dups = append(dups, id)
			continue
		}
		seen[id] = true
		sid, err := devicefn.ParseShareID(id)
		// a MIG-enabled GPU offers its instances, not shares
		if err != nil || gpus[sid.UUID] == nil || gpus[sid.UUID].gpu.MIG || sid.Index >= perGPU {
			unknown = append(unknown, id)
			continue
		}
		byGPU[sid.UUID] = append(byGPU[sid.UUID], sid.Index)
	}
	if len(unknown) > 0 {
		var shared []string
		for _, u := range sortedKeys(gpus) {
			if !gpus[u].gpu.MIG {
				shared = append(shared, u)
			}
		}
		return nil, fmt.Errorf("%w: %s: this node's gpushare plugin offers shares 0..%d of the GPUs %s",
			ErrUnknownShare, list(unknown), perGPU-1, list(shared))
	}
	if len(dups) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrDuplicateShare, list(dups))
	}

	// unhealthy GPUs
	uuids := sortedKeys(byGPU)
	var sick []string
	for _, u := range uuids {
		if st := gpus[u]; !st.healthy {
			sick = append(sick, fmt.Sprintf("%s (%s; shares %s)", u, st.reason, ranges(byGPU[u])))
		}
	}
	if len(sick) > 0 {
		return nil, fmt.Errorf("%w: %s; ask Nomad to place the task again", ErrUnhealthyShare, strings.Join(sick, ", "))
	}

	// the share rules
	n := len(ids)
	counts := func() string {
		parts := make([]string, len(uuids))
		for i, u := range uuids {
			parts[i] = fmt.Sprintf("%s has %d", u, len(byGPU[u]))
		}
		return strings.Join(parts, ", ")
	}
	switch {
	case cfg.Sharing == devicefn.SharingExclusive && n%perGPU != 0:
		return nil, fmt.Errorf("%w: %d shares is not a multiple of shares_per_gpu (%d); ask for %d or %d",
			ErrExclusive, n, perGPU, max(perGPU, n/perGPU*perGPU), (n/perGPU+1)*perGPU)
	case n < perGPU && len(uuids) > 1:
		return nil, fmt.Errorf("%w: %d shares (fewer than shares_per_gpu = %d) span %d GPUs: %s",
			ErrSplitFraction, n, perGPU, len(uuids), counts())
	case n >= perGPU:
		var partial []string
		for _, u := range uuids {
			if len(byGPU[u]) != perGPU {
				partial = append(partial, fmt.Sprintf("%s has %d of %d", u, len(byGPU[u]), perGPU))
			}
		}
		if len(partial) > 0 {
			return nil, fmt.Errorf("%w: %d shares (shares_per_gpu = %d) include part of a GPU: %s; request a multiple of %d shares",
				ErrPartialGPU, n, perGPU, strings.Join(partial, ", "), perGPU)
		}
	}

	// GPUs in NVML index order
	sort.Slice(uuids, func(i, j int) bool { return gpus[uuids[i]].gpu.Index < gpus[uuids[j]].gpu.Index })
	visible := strings.Join(uuids, ",")
	fraction := float64(n) / float64(perGPU)
	first := gpus[uuids[0]].gpu
	memPerGPU := first.MemoryMiB
	if len(uuids) == 1 {
		memPerGPU = first.MemoryMiB * uint64(n) / uint64(perGPU)
	}
	res := &device.ContainerReservation{Envs: map[string]string{
		EnvNvidiaVisible: visible,
		EnvCUDAVisible:   visible,
		EnvShares:        strconv.Itoa(n),
		EnvShareIDs:      devicefn.FormatShareIDs(uuids, byGPU),
		EnvSharesPerGPU:  strconv.Itoa(perGPU),
		EnvFraction:      strconv.FormatFloat(fraction, 'f', -1, 64),
		EnvShareMemory:   strconv.FormatUint(memPerGPU, 10),
		EnvSharing:       cfg.Sharing,
	}}
	sortedIDs := append([]string(nil), ids...)
	sort.Strings(sortedIDs)
	if cfg.Sharing == devicefn.SharingMPS {
		lim := mpsLimits{Visible: uuids, Threads: int(math.Ceil(100 * min(fraction, 1)))}
		for _, u := range uuids {
			mem := gpus[u].gpu.MemoryMiB
			if len(uuids) == 1 {
				mem = memPerGPU
			}
			lim.MemoryMiB = append(lim.MemoryMiB, mem)
		}
		res.Envs[EnvMPSThreads] = strconv.Itoa(lim.Threads)
		res.Envs[EnvMPSPinnedMemory] = lim.pinned()
		if cfg.MPS.Daemons == MPSDaemonsReservation {
			if err := p.reserveMPSDaemon(cfg.MPS, reservationDirName(uuids, byGPU), sortedIDs, lim, res); err != nil {
				return nil, err
			}
		} else {
			res.Envs[EnvMPSPipe] = cfg.MPS.PipeDirectory
			res.Envs[EnvMPSLog] = cfg.MPS.LogDirectory
			res.Mounts = []*device.Mount{
				{TaskPath: cfg.MPS.PipeDirectory, HostPath: cfg.MPS.PipeDirectory},
				{TaskPath: cfg.MPS.LogDirectory, HostPath: cfg.MPS.LogDirectory},
			}
		}
	}
	if cfg.Interposer.Enabled {
		var memBytes uint64
		for _, u := range uuids {
			memBytes += gpus[u].gpu.MemoryMiB
		}
		if len(uuids) == 1 {
			memBytes = memPerGPU
		}
		lim := interposerLimits{memoryBytes: memBytes << 20, computePct: int(math.Ceil(100 * min(fraction, 1)))}
		if ip := cfg.Interposer; ip.UnifiedMemory {
			lim.unifiedMemory = true
			lim.unifiedExtraBytes = lim.memoryBytes * uint64(ip.UnifiedOversubscriptionPct) / 100
		}
		if err := p.reserveInterposer(cfg.Interposer, reservationDirName(uuids, byGPU), sortedIDs, uuids[0], lim, res); err != nil {
			return nil, err
		}
	}
	nodes := append([]string(nil), controlDevices...)
	for _, u := range uuids {
		if m := gpus[u].gpu.Minor; m >= 0 {
			nodes = append(nodes, "/dev/nvidia"+strconv.Itoa(m))
		}
	}
	for _, dev := range nodes {
		if p.exists(dev) {
			res.Devices = append(res.Devices, &device.DeviceSpec{TaskPath: dev, HostPath: dev, CgroupPerms: "rw"})
		}
	}
	return res, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// list prints at most eight items, then how many more there are.
func list(items []string) string {
	const most = 8
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
}

// ranges prints share indices compactly: "0-24,50".
func ranges(idx []int) string {
	s := append([]int(nil), idx...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
