package gavel

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// Timeslice simulates gpushare's time-slicing (Gandiva's suspend/resume,
// issue 46 part 2) under the exclusive policy: a single-GPU job that
// would wait for a GPU of its own is placed time-sliced instead, by the
// placement core (placement.Request.Timeslice, asking shares for its GPU
// memory) on a GPU whose time-sliced jobs leave room for its memory. The
// time-sliced jobs of a GPU take the GPU in turns, one quantum each: each
// progresses at its isolated throughput for 1/n of the time, less a
// switch cost per quantum (the fluid limit of round robin, exact over
// many quanta: a quantum is seconds, a job hours). The first job on a GPU
// runs alone, as under exclusive, until another joins it.
type Timeslice struct {
	// On turns time-slicing on.
	On bool `json:"on"`
	// Quantum is each job's turn, in seconds (0: DefaultQuantum).
	Quantum float64 `json:"quantum_s"`
	// SwitchCost is the GPU time each switch of turns loses, in seconds
	// (0: DefaultSwitchCost): the running job's in-flight kernels drain
	// before the next one launches; memory stays, so nothing is copied.
	SwitchCost float64 `json:"switch_cost_s"`
	// MaxPerGPU is the most time-sliced jobs on one GPU (0:
	// placement.DefaultTimesliceMaxPerGPU).
	MaxPerGPU int `json:"max_per_gpu"`
	// Greedy time-slices a job even while a multi-GPU job waits ahead of
	// it in the queue. By default it then takes only an idle GPU, as
	// under exclusive: a GPU that time-slicing keeps busy never frees
	// whole, and the multi-GPU jobs would wait for the queue of
	// single-GPU jobs to run dry.
	Greedy bool `json:"greedy,omitempty"`
	// MemoryGB is each job type's GPU memory (nil: MemoryEstimateGB); a
	// GPU has its type's GPUMemoryGB.
	MemoryGB map[string]float64 `json:"-"`
}

// Time-slicing defaults: the scheduler's default quantum, and a switch
// that drains about one tenth of a training iteration.
const (
	DefaultQuantum    = 2.0
	DefaultSwitchCost = 0.05
)

// GPUMemoryGB is the memory of one GPU of each type Gavel measured: its
// V100s and P100s have 16 GB, a K80 board's two dies 12 GB each (Gavel's
// unit of a K80 is one die).
var GPUMemoryGB = map[string]float64{"v100": 16, "p100": 16, "k80": 12}

// MemoryEstimateGB is gpushare's estimate of each Gavel job type's GPU
// memory on a 16 GB V100 (Gavel publishes none): the typical footprint of
// the reference model's PyTorch training (weights, optimiser state and
// activations at the batch size, with the CUDA context), rounded up. Time-
// sliced jobs keep their memory on the GPU, so the jobs of one GPU must
// fit it together; two jobs Gavel measured as unable to share a GPU (0)
// are never put on one either.
var MemoryEstimateGB = map[string]float64{
	"ResNet-18 (batch size 16)": 1.2, "ResNet-18 (batch size 32)": 1.4, "ResNet-18 (batch size 64)": 1.8,
	"ResNet-18 (batch size 128)": 2.6, "ResNet-18 (batch size 256)": 4.2,
	"ResNet-50 (batch size 16)": 4.0, "ResNet-50 (batch size 32)": 6.0, "ResNet-50 (batch size 64)": 9.5,
	"ResNet-50 (batch size 128)":  11.0,
	"Transformer (batch size 16)": 2.0, "Transformer (batch size 32)": 2.8, "Transformer (batch size 64)": 4.0,
	"Transformer (batch size 128)": 6.5, "Transformer (batch size 256)": 10.5,
	"LM (batch size 5)": 1.5, "LM (batch size 10)": 1.7, "LM (batch size 20)": 2.0, "LM (batch size 40)": 2.6,
	"LM (batch size 80)":              3.6,
	"Recommendation (batch size 512)": 1.2, "Recommendation (batch size 1024)": 1.5, "Recommendation (batch size 2048)": 2.0,
	"Recommendation (batch size 4096)": 3.0, "Recommendation (batch size 8192)": 5.0,
	"A3C": 1.0, "CycleGAN": 4.5,
}

func (t *Timeslice) quantum() float64 {
	if t.Quantum > 0 {
		return t.Quantum
	}
	return DefaultQuantum
}

func (t *Timeslice) switchCost() float64 {
	if t.SwitchCost > 0 {
		return t.SwitchCost
	}
	return DefaultSwitchCost
}

func (t *Timeslice) maxPerGPU() int {
	if t.MaxPerGPU > 0 {
		return t.MaxPerGPU
	}
	return placement.DefaultTimesliceMaxPerGPU
}

// check validates the parameters for policy spec.
func (t *Timeslice) check(policy string) error {
	switch {
	case !t.On:
		return nil
	case policy != "exclusive":
		return fmt.Errorf("time-slicing is simulated under the exclusive policy (FIFO queueing), not %s", policy)
	case t.Quantum < 0 || t.SwitchCost < 0 || t.MaxPerGPU < 0:
		return fmt.Errorf("time-slicing: quantum %v s, switch cost %v s and max per GPU %d must not be negative", t.Quantum, t.SwitchCost, t.MaxPerGPU)
	case t.switchCost() >= t.quantum():
		return fmt.Errorf("time-slicing: a switch cost of %v s leaves nothing of a %v s quantum", t.switchCost(), t.quantum())
	}
	return nil
}

// shares is the shares of one GPU of type gpu (a Throughputs' type, never
// empty) a job of type typ asks for its memory.
func (t *Timeslice) shares(typ, gpu string) (int, error) {
	total, ok := GPUMemoryGB[gpu]
	if !ok {
		return 0, fmt.Errorf("time-slicing: the memory of GPU type %s is not known (known: %s)", gpuName(gpu), strings.Join(slices.Sorted(maps.Keys(GPUMemoryGB)), ", "))
	}
	mem := t.MemoryGB
	if mem == nil {
		mem = MemoryEstimateGB
	}
	gb, ok := mem[typ]
	switch {
	case !ok || gb <= 0:
		return 0, fmt.Errorf("time-slicing: no GPU memory estimate for job type %q", typ)
	case gb > total:
		return 0, fmt.Errorf("time-slicing: job type %q needs %.1f GB, more than a %s's %.0f GB", typ, gb, gpuName(gpu), total)
	}
	return int(math.Ceil(gb / total * devicefn.DefaultSharesPerGPU)), nil
}

// slice is the share of its isolated throughput a time-sliced job gets on
// a GPU with n time-sliced jobs.
func (t *Timeslice) slice(n int) float64 {
	if n <= 1 {
		return 1
	}
	return (1 - t.switchCost()/t.quantum()) / float64(n)
}

// placeTimesliced starts single-GPU job j time-sliced: on a GPU of its
// own when one is free (holding its memory's shares, so that others may
// join it), else, unless a multi-GPU job waits ahead of it (Greedy),
// beside time-sliced jobs whose memory leaves room for its own and that
// Gavel measured able to share a GPU with it.
func (s *sim) placeTimesliced(j Job) bool {
	const spg = devicefn.DefaultSharesPerGPU
	mem, err := s.opts.Timeslice.shares(j.Type, s.thr.gpu)
	if err != nil {
		panic(err) // checked for every job before the run
	}
	r := s.reqFor(j, spg)
	r.Timeslice = true
	if d := s.pol.Decide(s.snap, r); d.Placed() {
		p := d.Placements[0]
		s.addTimesliced(j, p.Node, p.GPUs[0], p.Shares[:mem])
		return true
	}
	if s.wholeWaits && !s.opts.Timeslice.Greedy {
		return false // a multi-GPU job waits ahead: no time-slicing past it
	}
	r.Shares = mem
	for range s.cluster.Nodes {
		d := s.pol.Decide(s.snap, r)
		if !d.Placed() {
			return false
		}
		p := d.Placements[0]
		if !s.fitsAll(j, p.GPUs[0]) {
			r.Avoid = append(slices.Clip(r.Avoid), p.Node)
			continue
		}
		if err := s.snap.Apply(d); err != nil {
			panic(err)
		}
		s.start(j, d.Placements, p.Shares)
		s.run[j.ID].ts = true
		return true
	}
	return false
}

// fitsAll reports whether Gavel measured j able to share a GPU with each
// job on GPU uuid.
func (s *sim) fitsAll(j Job, uuid string) bool {
	for _, id := range s.onGPU[uuid] {
		if _, _, ok := s.thr.Pair(j.Type, s.run[id].job.Type); !ok {
			return false
		}
	}
	return true
}

// addTimesliced records j time-sliced on the given shares of one GPU.
func (s *sim) addTimesliced(j Job, node, uuid string, shares []string) {
	id := s.reqFor(j, len(shares)).ID + "[0]"
	if err := s.snap.AddAlloc(placement.Alloc{ID: id, Node: node, Shares: shares, Timeslice: true}); err != nil {
		panic(err)
	}
	s.start(j, []placement.Placement{{AllocID: id, Node: node, GPUs: []string{uuid}}}, shares)
	s.run[j.ID].ts = true
}

// timesliceKey is the queue's memo key of a single-GPU job under
// time-slicing: jobs of one type fit where each other fits.
func timesliceKey(j Job) string { return "ts:" + j.Type + ":" + strconv.Itoa(j.Scale) }

// DefaultMaxPerGPU is the most time-sliced jobs on one GPU by default.
const DefaultMaxPerGPU = placement.DefaultTimesliceMaxPerGPU
