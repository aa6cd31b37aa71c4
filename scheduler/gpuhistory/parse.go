package gpuhistory

import (
	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/hashicorp/nomad/api"
)

// Stat names the plugin reports per share (plugin.Stat*).
const (
	statUtil      = "GPU utilization"
	statMemUtil   = "Memory utilization"
	statMemUsed   = "Memory used"
	statPower     = "Power usage"
	statTemp      = "Temperature"
	statProcessSM = "Process SM utilization"
)

// Share is what one share reported.
type Share struct {
	GPU string
	// ProcessSM is the SM utilisation of the processes holding the share,
	// when the plugin saw them (HasProcess).
	ProcessSM  float64
	HasProcess bool
	// Timeslice is its task's time-slicing, when it is time-sliced.
	Timeslice *Timeslice
}

// Round is what a round of reading nodes' device stats found.
type Round struct {
	// GPUs are the stats of each GPU by UUID, read on any of its shares.
	GPUs map[string]gpumap.Stats
	// Shares are the shares that reported, by share ID.
	Shares map[string]Share
	// PerGPU counts the shares that reported, by GPU UUID.
	PerGPU map[string]int
}

// NewRound is an empty round.
func NewRound() *Round {
	return &Round{GPUs: map[string]gpumap.Stats{}, Shares: map[string]Share{}, PerGPU: map[string]int{}}
}

// Add reads one node's device stats: the gpushare devices' shares of
// whole GPUs (MIG instances are not GPUs of the map).
func (r *Round) Add(groups []*api.DeviceGroupStats) {
	for _, g := range groups {
		if g == nil || g.Vendor != devicefn.Vendor || g.Type != devicefn.DeviceType {
			continue
		}
		for id, st := range g.InstanceStats {
			sid, err := devicefn.ParseShareID(id)
			if err != nil || st == nil || st.Stats == nil {
				continue
			}
			a := st.Stats.Attributes
			r.PerGPU[sid.UUID]++
			sh := Share{GPU: sid.UUID}
			sh.ProcessSM, sh.HasProcess = num(a[statProcessSM])
			sh.Timeslice, _ = timesliceOf(a)
			r.Shares[id] = sh
			if _, ok := r.GPUs[sid.UUID]; ok {
				continue
			}
			var s gpumap.Stats
			s.UtilizationPct, _ = num(a[statUtil])
			s.MemoryUtilizationPct, _ = num(a[statMemUtil])
			if v := a[statMemUsed]; v != nil {
				used, _ := num(v)
				s.MemoryUsedMiB = uint64(max(used, 0))
				if v.IntDenominatorVal != nil && *v.IntDenominatorVal > 0 {
					s.MemoryTotalMiB = uint64(*v.IntDenominatorVal)
				} else if v.FloatDenominatorVal != nil && *v.FloatDenominatorVal > 0 {
					s.MemoryTotalMiB = uint64(*v.FloatDenominatorVal)
				}
			}
			s.PowerW, _ = num(a[statPower])
			s.TemperatureC, _ = num(a[statTemp])
			r.GPUs[sid.UUID] = s
		}
	}
}

// Use is an allocation's utilisation, in percent of one GPU, from the
// shares it holds: on each of its GPUs, its processes' SM utilisation
// when the plugin reports it, else the GPU's utilisation times the part
// of the GPU's shares it holds; summed over its GPUs. ok is false when
// none of its shares reported.
func (r *Round) Use(shares []string) (float64, bool) {
	held := map[string]int{}
	proc := map[string]float64{}
	hasProc := map[string]bool{}
	for _, id := range shares {
		sh, ok := r.Shares[id]
		if !ok {
			continue
		}
		held[sh.GPU]++
		if sh.HasProcess {
			hasProc[sh.GPU] = true
			proc[sh.GPU] = max(proc[sh.GPU], sh.ProcessSM)
		}
	}
	if len(held) == 0 {
		return 0, false
	}
	sum := 0.0
	for gpu, n := range held {
		if hasProc[gpu] {
			sum += proc[gpu]
			continue
		}
		if total := r.PerGPU[gpu]; total > 0 {
			sum += r.GPUs[gpu].UtilizationPct * float64(n) / float64(total)
		}
	}
	return sum, true
}

func num(v *api.StatValue) (float64, bool) {
	switch {
	case v == nil:
		return 0, false
	case v.IntNumeratorVal != nil:
		return float64(*v.IntNumeratorVal), true
	case v.FloatNumeratorVal != nil:
		return *v.FloatNumeratorVal, true
	}
	return 0, false
}
