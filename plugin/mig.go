package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
	"github.com/hashicorp/go-hclog"
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
	var inst, other []string
	distinct, dups := splitDuplicates(ids)
	for _, id := range distinct {
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
		EnvShareIDs:      m.UUID, // the instance is the share (devicefn.ParseShareIDs)
		EnvFraction:      strconv.FormatFloat(m.Fraction(), 'f', 4, 64),
		EnvShareMemory:   strconv.FormatUint(m.MemoryMiB, 10),
		EnvSharing:       devicefn.SharingMIG,
		EnvMIGProfile:    m.Profile,
		EnvMIGParent:     m.Parent.UUID,
	}}
	res.Envs[EnvFraction] = strings.TrimRight(strings.TrimRight(res.Envs[EnvFraction], "0"), ".")
	res.Devices = p.deviceSpecs(migNodes(st.gpu.Minor, m.CapMinors))
	p.logger.Info("MIG instance reserved", "mig_device", m.UUID, "profile", m.Profile, "gpu", m.Parent.UUID)
	return res, nil
}

// migNodes are the device nodes of a MIG instance besides the control
// nodes: its parent's /dev/nvidia<minor> and its /dev/nvidia-caps nodes.
func migNodes(parentMinor int, capMinors []int) []string {
	nodes := gpuNode(parentMinor)
	for _, c := range capMinors {
		nodes = append(nodes, capsDir+"/nvidia-cap"+strconv.Itoa(c))
	}
	return nodes
}

// applyMIGLayouts makes the instances of every MIG-enabled GPU of a model
// listed in the mig block the profiles listed, through a source that can
// (devicefn.MIGLayouter), and returns the inventory read again when it
// changed one (else inv). Busy GPUs, GPUs with MIG mode off and sources
// that cannot change layouts are logged once per state and left alone.
func (p *Plugin) applyMIGLayouts(ctx context.Context, cfg *Config, src devicefn.Source, inv *devicefn.Inventory, skip map[string]bool) *devicefn.Inventory {
	layouter, canLayout := src.(devicefn.MIGLayouter)
	changed := false
	for _, g := range inv.GPUs {
		want, listed := cfg.MIG[g.Model]
		if !listed || skip[g.UUID] {
			continue
		}
		switch {
		case !g.MIG:
			p.noteLayout(g.UUID, hclog.Warn, "MIG mode is off: no layout applied; turn it on with nvidia-smi -i <gpu> -mig 1 (the GPU is reset)", nil)
		case devicefn.SameProfiles(g.MIGDevices, want):
			p.noteLayout(g.UUID, hclog.Info, "MIG layout in place", nil)
		case !canLayout:
			p.noteLayout(g.UUID, hclog.Warn, "the gpu source cannot change MIG layouts: mig block ignored", nil)
		default:
			err := layouter.ApplyMIGLayout(ctx, g.UUID, want)
			switch {
			case err == nil:
				changed = true
				p.noteLayout(g.UUID, hclog.Info, "MIG layout applied", nil)
			case errors.Is(err, devicefn.ErrGPUBusy):
				p.noteLayout(g.UUID, hclog.Info, "gpu busy: MIG layout left as it is until the gpu is idle", err)
			default:
				p.noteLayout(g.UUID, hclog.Error, "cannot apply the MIG layout", err)
			}
		}
	}
	if !changed {
		return inv
	}
	again, err := src.Inventory(ctx)
	if err != nil {
		p.logger.Error("failed to list gpus after a MIG layout change; reporting the inventory before it", "error", err)
		return inv
	}
	return again
}

// noteLayout logs a GPU's layout state when it differs from the last one
// logged for that GPU.
func (p *Plugin) noteLayout(uuid string, level hclog.Level, msg string, err error) {
	state := msg
	if err != nil {
		state += ": " + err.Error()
	}
	p.mu.Lock()
	if p.layoutNotes == nil {
		p.layoutNotes = map[string]string{}
	}
	same := p.layoutNotes[uuid] == state
	p.layoutNotes[uuid] = state
	p.mu.Unlock()
	if same {
		return
	}
	args := []any{"gpu", uuid}
	if err != nil {
		args = append(args, "error", err)
	}
	p.logger.Log(level, msg, args...)
}
