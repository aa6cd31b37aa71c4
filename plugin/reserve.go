package plugin

import (
	"errors"
	"fmt"
	"maps"
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

	// EnvGPUPrefix: a reservation of shares of whole (not MIG) GPUs sets
	// EnvGPUPrefix+<NVML index> to each GPU's UUID, and
	// EnvGPUPrefix+<NVML index>+EnvGPUSharesSuffix to the number of its
	// shares it holds. The names are unique per GPU of a node, so when
	// Nomad merges a task's several reservations (one device block per
	// GPU of per-GPU groups) by overwriting, every GPU's survive, and the
	// interposer puts the task's GPUs back together from them
	// (plugin/interposer/src/compose.c, which mirrors both names).
	EnvGPUPrefix       = "GPUSHARE_GPU_"
	EnvGPUSharesSuffix = "_SHARES"
)

// controlDevices are the device nodes every CUDA task needs besides its
// GPUs' own /dev/nvidia<minor>.
var controlDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Reserve implements device.DevicePlugin. It refuses unknown or unhealthy
// share IDs, a fraction spread over several GPUs, and a request of
// shares_per_gpu or more shares that is not made of whole GPUs. A request
// for MIG instances is reserveMIG's, one for shares of MIG instances
// reserveMIGShares's.
func (p *Plugin) Reserve(ids []string) (*device.ContainerReservation, error) {
	p.mu.Lock()
	cfg, gpus, migs, shared := p.cfg, p.gpus, p.migs, p.migShares
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
	if isMIGShareRequest(ids, shared) {
		return p.reserveMIGShares(cfg, ids, gpus, shared)
	}
	perGPU := cfg.SharesPerGPU

	// unknown and duplicate IDs
	byGPU := map[string][]int{}
	var unknown []string
	distinct, dups := splitDuplicates(ids)
	for _, id := range distinct {
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
	g := grant{visible: uuids, byDevice: byGPU, n: n, perGPU: perGPU, computePct: ceilPct(n, perGPU),
		envs: map[string]string{}}
	if n >= perGPU { // the rules above: whole GPUs
		g.wholeGPUs = len(uuids)
	}
	for _, u := range uuids {
		st := gpus[u]
		index := EnvGPUPrefix + strconv.Itoa(st.gpu.Index)
		g.envs[index] = u
		g.envs[index+EnvGPUSharesSuffix] = strconv.Itoa(len(byGPU[u]))
		mem := st.gpu.MemoryMiB
		if len(uuids) == 1 {
			mem = mem * uint64(n) / uint64(perGPU)
		}
		g.memoryMiB = append(g.memoryMiB, mem)
		g.nodes = append(g.nodes, gpuNode(st.gpu.Minor)...)
	}
	return p.grant(cfg, ids, g)
}

// grant is what a reservation that passed its rules hands the task: its
// devices, GPUs or one shared MIG instance, and the limits within them.
type grant struct {
	// visible are the task's CUDA devices (GPU or MIG device UUIDs), in
	// order; byDevice the share indices reserved on each.
	visible  []string
	byDevice map[string][]int
	// n shares of perGPU each: the task's fraction of a GPU is n/perGPU.
	n, perGPU int
	// memoryMiB is the task's memory on each visible device.
	memoryMiB []uint64
	// computePct is the task's percentage of its device's SMs (MPS active
	// threads, the interposer's compute_pct).
	computePct int
	// nodes are the device nodes of the devices, besides controlDevices.
	nodes []string
	// envs are set besides the common ones.
	envs map[string]string
	// wholeGPUs is the number of whole GPUs granted (0: a fraction, or
	// a MIG instance's shares).
	wholeGPUs int
}

// ceilPct is n of of in percent, rounded up, at most 100 (in integers: a
// float's 100*0.07 rounds up to 8).
func ceilPct(n, of int) int {
	if of <= 0 {
		return 100
	}
	return min(100, (100*n+of-1)/of)
}

// gpuNode is the device node of a GPU with the given minor (none for -1).
func gpuNode(minor int) []string {
	if minor < 0 {
		return nil
	}
	return []string{"/dev/nvidia" + strconv.Itoa(minor)}
}

// grant writes a reservation's environment, starts or reuses its MPS
// daemon and writes its interposer limits, and lists its device nodes.
func (p *Plugin) grant(cfg *Config, ids []string, g grant) (*device.ContainerReservation, error) {
	visible := strings.Join(g.visible, ",")
	res := &device.ContainerReservation{Envs: map[string]string{
		EnvNvidiaVisible: visible,
		EnvCUDAVisible:   visible,
		EnvShares:        strconv.Itoa(g.n),
		EnvShareIDs:      devicefn.FormatShareIDs(g.visible, g.byDevice),
		EnvSharesPerGPU:  strconv.Itoa(g.perGPU),
		EnvFraction:      strconv.FormatFloat(float64(g.n)/float64(g.perGPU), 'f', -1, 64),
		EnvShareMemory:   strconv.FormatUint(g.memoryMiB[0], 10),
		EnvSharing:       cfg.Sharing,
	}}
	maps.Copy(res.Envs, g.envs)
	sortedIDs := append([]string(nil), ids...)
	sort.Strings(sortedIDs)
	dir := reservationDirName(g.visible, g.byDevice)
	mps := cfg.Sharing == devicefn.SharingMPS && !(g.wholeGPUs > 0 && cfg.wholeWithoutMPS())
	if mps {
		lim := mpsLimits{Visible: g.visible, Threads: g.computePct, MemoryMiB: g.memoryMiB}
		res.Envs[EnvMPSThreads] = strconv.Itoa(lim.Threads)
		res.Envs[EnvMPSPinnedMemory] = lim.pinned()
		if cfg.MPS.Daemons == MPSDaemonsReservation {
			if err := p.reserveMPSDaemon(cfg.MPS, dir, sortedIDs, lim, res); err != nil {
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
		var memMiB uint64
		for _, m := range g.memoryMiB {
			memMiB += m
		}
		lim := interposerLimits{memoryBytes: memMiB << 20, computePct: g.computePct,
			contextBytes: uint64(cfg.Interposer.ContextMiB) << 20, turnMs: cfg.Interposer.TurnMs, wholeGPUs: g.wholeGPUs}
		if mps {
			// the MPS daemon already holds the task to its SMs (its active
			// thread percentage): pacing its time too would leave it
			// computePct of computePct (issue 29, defect 3)
			lim.mpsThreadPct, lim.computePct = g.computePct, 100
		}
		if ip := cfg.Interposer; ip.UnifiedMemory {
			lim.unifiedMemory = true
			lim.unifiedExtraBytes = lim.memoryBytes * uint64(ip.UnifiedOversubscriptionPct) / 100
		}
		if err := p.reserveInterposer(cfg.Interposer, dir, sortedIDs, g.visible[0], lim, res); err != nil {
			return nil, err
		}
	}
	res.Devices = p.deviceSpecs(g.nodes)
	return res, nil
}

// deviceSpecs are the control nodes and nodes that exist on the host, as
// the task's devices.
func (p *Plugin) deviceSpecs(nodes []string) []*device.DeviceSpec {
	var out []*device.DeviceSpec
	for _, dev := range append(append([]string(nil), controlDevices...), nodes...) {
		if p.exists(dev) {
			out = append(out, &device.DeviceSpec{TaskPath: dev, HostPath: dev, CgroupPerms: "rw"})
		}
	}
	return out
}

// splitDuplicates returns ids without repeats, in order, and the repeats.
func splitDuplicates(ids []string) (distinct, dups []string) {
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			dups = append(dups, id)
			continue
		}
		seen[id] = true
		distinct = append(distinct, id)
	}
	return distinct, dups
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
