package plugin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/internal/nomadplugin/device"
)

// ErrMIGSpread refuses shares of a MIG instance (mig_instances = "shared")
// reserved with shares of another instance or of a GPU: CUDA gives a
// process one MIG device, and instances are never joined.
var ErrMIGSpread = errors.New("shares of a MIG instance must all be on that one instance")

// migShare is a MIG instance offered as shares (mig_instances = "shared").
type migShare struct {
	devicefn.MIGDevice
	// Parent is the parent GPU's UUID; its health is in Plugin.gpus.
	Parent string
	// Shares is how many shares the instance offers, ShareMiB the memory
	// each stands for.
	Shares   int
	ShareMiB uint64
}

// migSharesOf indexes the shared MIG instances of groups by MIG UUID.
func migSharesOf(inv *devicefn.Inventory, groups []devicefn.Group) map[string]migShare {
	out := map[string]migShare{}
	if inv == nil {
		return out
	}
	devs := map[string]devicefn.MIGDevice{}
	for _, g := range inv.GPUs {
		for _, m := range g.MIGDevices {
			devs[m.UUID] = m
		}
	}
	for i := range groups {
		g := &groups[i]
		if g.MIG == nil {
			continue
		}
		for _, gpu := range g.GPUs {
			out[gpu.UUID] = migShare{MIGDevice: devs[gpu.UUID], Parent: gpu.Parent, Shares: g.GPUShares(), ShareMiB: g.ShareMemoryMiB()}
		}
	}
	return out
}

// parentReason is a MIG instance's health description: its parent's
// reason, when the parent is unhealthy.
func parentReason(parent string, st *gpuState) string {
	if st == nil || st.healthy {
		return ""
	}
	return "parent GPU " + parent + ": " + st.reason
}

// isMIGShareRequest says whether a reservation names a share of a MIG
// instance offered as shares.
func isMIGShareRequest(ids []string, shared map[string]migShare) bool {
	for _, id := range ids {
		if sid, err := devicefn.ParseShareID(id); err == nil {
			if _, ok := shared[sid.UUID]; ok {
				return true
			}
		}
	}
	return false
}

// reserveMIGShares reserves shares of one shared MIG instance. A share is
// 1/shares_per_gpu of the parent GPU; within the instance the task is
// held to its part of the instance (MPS, the interposer), as on a GPU. It
// refuses shares on two instances or on an instance and a GPU, duplicates,
// unknown IDs (an index beyond the instance's shares among them), shares
// of an unhealthy parent, and, with sharing = "exclusive", part of an
// instance.
func (p *Plugin) reserveMIGShares(cfg *Config, ids []string, gpus map[string]*gpuState, shared map[string]migShare) (*device.ContainerReservation, error) {
	byInst := map[string][]int{}
	var unknown, onGPUs []string
	distinct, dups := splitDuplicates(ids)
	for _, id := range distinct {
		sid, err := devicefn.ParseShareID(id)
		m, isMIG := shared[sid.UUID]
		switch {
		case err != nil:
			unknown = append(unknown, id)
		case isMIG && sid.Index < m.Shares:
			byInst[sid.UUID] = append(byInst[sid.UUID], sid.Index)
		case !isMIG && gpus[sid.UUID] != nil && !gpus[sid.UUID].gpu.MIG && sid.Index < cfg.SharesPerGPU:
			onGPUs = append(onGPUs, id)
		default:
			unknown = append(unknown, id)
		}
	}
	insts := sortedKeys(byInst)
	switch {
	case len(unknown) > 0:
		offers := make([]string, 0, len(shared))
		for _, u := range sortedKeys(shared) {
			offers = append(offers, fmt.Sprintf("%s (%s, shares 0..%d)", u, shared[u].Profile, shared[u].Shares-1))
		}
		return nil, fmt.Errorf("%w: %s: this node's gpushare plugin offers the shares of the MIG instances %s, and shares 0..%d of its GPUs without MIG",
			ErrUnknownShare, list(unknown), list(offers), cfg.SharesPerGPU-1)
	case len(dups) > 0:
		return nil, fmt.Errorf("%w: %s", ErrDuplicateShare, list(dups))
	case len(onGPUs) > 0:
		return nil, fmt.Errorf("%w: shares of the MIG instance %s and of GPUs (%s) requested together; a fraction is on one instance or on one GPU",
			ErrMIGSpread, list(insts), list(onGPUs))
	case len(insts) > 1:
		parts := make([]string, len(insts))
		for i, u := range insts {
			parts[i] = fmt.Sprintf("%s has %d", u, len(byInst[u]))
		}
		return nil, fmt.Errorf("%w: %d shares span %d MIG instances (%s), but CUDA gives a process one MIG device and instances cannot be joined; ask for at most the shares of one instance",
			ErrMIGSpread, len(ids), len(insts), strings.Join(parts, ", "))
	}
	u := insts[0]
	m, idx := shared[u], byInst[u]
	st := gpus[m.Parent]
	if st == nil || !st.healthy {
		reason := "not found"
		if st != nil {
			reason = st.reason
		}
		return nil, fmt.Errorf("%w: shares %s of MIG instance %s of GPU %s (%s); ask Nomad to place the task again",
			ErrUnhealthyShare, ranges(idx), u, m.Parent, reason)
	}
	n := len(idx)
	if cfg.Sharing == devicefn.SharingExclusive && n != m.Shares {
		return nil, fmt.Errorf("%w: %d shares of MIG instance %s (%s), which offers %d; ask for all %d",
			ErrExclusive, n, u, m.Profile, m.Shares, m.Shares)
	}
	p.logger.Info("shares of a MIG instance reserved", "mig_device", u, "profile", m.Profile, "gpu", m.Parent,
		"shares", n, "instance_shares", m.Shares)
	return p.grant(cfg, ids, grant{
		visible: []string{u}, byDevice: byInst, n: n, perGPU: cfg.SharesPerGPU,
		memoryMiB:  []uint64{uint64(n) * m.ShareMiB},
		computePct: ceilPct(n, m.Shares),
		nodes:      migNodes(st.gpu.Minor, m.CapMinors),
		envs:       map[string]string{EnvMIGProfile: m.Profile, EnvMIGParent: m.Parent},
	})
}
