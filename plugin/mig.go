package plugin

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
)

// MIG reservation errors.
var (
	ErrMIGMixed       = errors.New("MIG instances and shares of GPUs cannot be reserved together")
	ErrMIGOneInstance = errors.New("a task gets one whole MIG instance")
)

// Environment variables set by Reserve for a MIG instance.
const (
	EnvMIGProfile = "GPUSHARE_MIG_PROFILE"
	EnvMIGParent  = "GPUSHARE_MIG_PARENT"
)

// capsDir holds the device nodes that give access to MIG instances.
const capsDir = "/dev/nvidia-caps"

// isMIGRequest says whether a reservation names any MIG instance this node
// offers (the IDs of nvidia/gpushare-mig devices are MIG device UUIDs).
func isMIGRequest(ids []string, migs map[string]devicefn.MIGInstance) bool {
	for _, id := range ids {
		if _, ok := migs[id]; ok {
			return true
		}
	}
	return false
}

// reserveMIG hands a task one MIG instance: the instance is the task's
// whole GPU, isolated by the hardware, so there is no MPS daemon and no
// interposer. It refuses IDs this node does not offer, shares of GPUs in
// the same request, more than one instance (CUDA gives a process a single
// MIG device) and instances of unhealthy GPUs.
func (p *Plugin) reserveMIG(ids []string, gpus map[string]*gpuState, migs map[string]devicefn.MIGInstance) (*device.ContainerReservation, error) {
	var inst, other, dups []string
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			dups = append(dups, id)
			continue
		}
		seen[id] = true
		if _, ok := migs[id]; ok {
			inst = append(inst, id)
		} else {
			other = append(other, id)
		}
	}
	sort.Strings(inst)
	switch {
	case len(other) > 0:
		if _, err := devicefn.ParseShareID(other[0]); err == nil {
			return nil, fmt.Errorf("%w: MIG instances %s and shares %s; ask for them in two device blocks", ErrMIGMixed, list(inst), list(other))
		}
		return nil, fmt.Errorf("%w: %s: this node's gpushare plugin offers the MIG instances %s", ErrUnknownShare, list(other), list(sortedKeys(migs)))
	case len(dups) > 0:
		return nil, fmt.Errorf("%w: %s", ErrDuplicateShare, list(dups))
	case len(inst) > 1:
		return nil, fmt.Errorf("%w: %d instances requested (%s), but CUDA gives a process one MIG device and instances cannot be joined; ask for count = 1 of a larger profile, or for whole GPUs without MIG (nvidia/gpushare)",
			ErrMIGOneInstance, len(inst), list(inst))
	}
	m := migs[inst[0]]
	st := gpus[m.Parent.UUID]
	if st == nil || !st.healthy {
		reason := "not found"
		if st != nil {
			reason = st.reason
		}
		return nil, fmt.Errorf("%w: MIG instance %s of GPU %s (%s); ask Nomad to place the task again", ErrUnhealthyShare, m.UUID, m.Parent.UUID, reason)
	}
	res := &device.ContainerReservation{Envs: map[string]string{
		EnvNvidiaVisible: m.UUID,
		EnvCUDAVisible:   m.UUID,
		EnvShares:        "1",
		EnvFraction:      strconv.FormatFloat(m.Fraction(), 'f', 4, 64),
		EnvShareMemory:   strconv.FormatUint(m.MemoryMiB, 10),
		EnvSharing:       devicefn.SharingMIG,
		EnvMIGProfile:    m.Profile,
		EnvMIGParent:     m.Parent.UUID,
	}}
	res.Envs[EnvFraction] = strings.TrimRight(strings.TrimRight(res.Envs[EnvFraction], "0"), ".")
	nodes := append([]string(nil), controlDevices...)
	if minor := st.gpu.Minor; minor >= 0 {
		nodes = append(nodes, "/dev/nvidia"+strconv.Itoa(minor))
	}
	for _, c := range m.CapMinors {
		nodes = append(nodes, capsDir+"/nvidia-cap"+strconv.Itoa(c))
	}
	for _, dev := range nodes {
		if p.exists(dev) {
			res.Devices = append(res.Devices, &device.DeviceSpec{TaskPath: dev, HostPath: dev, CgroupPerms: "rw"})
		}
	}
	p.logger.Info("MIG instance reserved", "mig_device", m.UUID, "profile", m.Profile, "gpu", m.Parent.UUID)
	return res, nil
}
