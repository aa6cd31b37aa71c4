package gavel

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// Elastic groups (Gandiva's grow-shrink, KAI's elastic workloads): a job
// that opts in runs between min replicas (the GPUs its trace line asks
// for) and max (MaxFactor times that). After each decision step the
// simulator grows elastic jobs, one replica (a whole GPU) at a time, into
// GPUs no job uses, as the service would through Nomad's scale API. A
// grown replica is an opportunistic allocation lent capacity that would
// otherwise idle: the decision step decides the queue on the cluster
// without the grown replicas, so waiting work is placed (and reserves
// servers) as it would be were their GPUs idle. When a placement takes
// the GPU of a grown replica, the replica's job shrinks by as many
// replicas, newest first (as Nomad stops the highest-indexed allocations
// when a count goes down), and the queue is decided again, until nothing
// placed is left queued behind a grown replica; when the replica on the
// GPU wanted is not the job's newest, that takes more than one shrink.
// The min replicas are the job's own allocations, never shrunk, and the
// replicas that stay never restart. Only the gpushare policies (those
// running the service's decision step) grow jobs; the baselines ignore
// Elastic.

// Elastic configures elastic groups; the zero value is off.
type Elastic struct {
	// Share is the fraction of jobs that opt in, drawn per job (in
	// arrival order) with Seed.
	Share float64 `json:"share"`
	// MaxFactor bounds an elastic job at MaxFactor times the GPUs its trace
	// line requests (0: DefaultElasticMax).
	MaxFactor int `json:"max_factor"`
	// Seed seeds the draw of the jobs that opt in.
	Seed uint64 `json:"seed"`
	// ResizeCost is the progress a job loses to each grow or shrink, in
	// seconds at its new rate: the pause while its replicas re-form their
	// all-reduce ring from the state in memory (0: DefaultResizeCost).
	ResizeCost float64 `json:"resize_cost_s"`
}

// DefaultElasticMax is the default MaxFactor: four times the GPUs asked for.
const DefaultElasticMax = 4

// DefaultResizeCost is the default ResizeCost: 30 s.
const DefaultResizeCost = 30

// On reports whether any job may opt in.
func (e Elastic) On() bool { return e.Share > 0 }

// maxFactor and resizeCost are the settings with their defaults.
func (e Elastic) maxFactor() int {
	if e.MaxFactor <= 0 {
		return DefaultElasticMax
	}
	return e.MaxFactor
}

func (e Elastic) resizeCost() float64 {
	if e.ResizeCost <= 0 {
		return DefaultResizeCost
	}
	return e.ResizeCost
}

// optIn draws the jobs that opt in, n jobs in arrival order: the same seed
// and share give the same jobs.
func (e Elastic) optIn(n int) []bool {
	out := make([]bool, n)
	if !e.On() {
		return out
	}
	rng := rand.New(rand.NewPCG(e.Seed, 0x656c6173746963)) // "elastic"
	for i := range out {
		out[i] = rng.Float64() < e.Share
	}
	return out
}

// Scaling model. Gavel's traces give each job the GPUs it asks for and the
// throughput measured at that scale; its measurements across scale factors
// are too irregular to extrapolate a grown job from (some double from one
// GPU to two, some fall from two to four). A grown job instead scales its
// measured throughput at min replicas by the ratio of an Amdahl-style
// speedup, S(n) = n / (1 + c (n - 1)): c is the share of a one-replica step
// that each further replica adds in gradient synchronisation, set per model
// family by how much it communicates per unit of compute (parameters or
// embeddings per FLOP), and doubled (to at most 1) when the replicas span
// servers. Each added replica gains less than the one before. With c 0.05
// eight replicas run 5.9 times one; with 0.30, 2.6 times; A3C (on-policy
// reinforcement learning, not data-parallel) gains nothing and never grows.
var scalingC = map[string]float64{
	"ResNet-50":      0.05, // 25M parameters, 4 GFLOP per image
	"ResNet-18":      0.10, // 11M parameters, 1.8 GFLOP per image
	"CycleGAN":       0.10,
	"Transformer":    0.15, // 65M parameters, short steps
	"LM":             0.20, // LSTM with a large embedding
	"Recommendation": 0.30, // embedding tables: mostly communication
	"A3C":            1,    // does not scale by replicas
}

// scalingNote lists c per family, lowest first, for the report.
func scalingNote() string {
	fams := slices.Collect(maps.Keys(scalingC))
	slices.SortFunc(fams, func(a, b string) int { return cmp.Or(cmp.Compare(scalingC[a], scalingC[b]), strings.Compare(a, b)) })
	parts := make([]string, len(fams))
	for i, f := range fams {
		parts[i] = fmt.Sprintf("%s %.2f", f, scalingC[f])
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(", others %.2f", defaultScalingC)
}

// defaultScalingC is c for a family not listed.
const defaultScalingC = 0.2

// familyC is c for job type typ ("ResNet-18 (batch size 64)": ResNet-18).
func familyC(typ string, spansServers bool) float64 {
	fam, _, _ := strings.Cut(typ, " (")
	c, ok := scalingC[fam]
	if !ok {
		c = defaultScalingC
	}
	if spansServers {
		c = min(2*c, 1)
	}
	return c
}

// speedup is S(n) for c.
func speedup(n int, c float64) float64 { return float64(n) / (1 + c*float64(n-1)) }

// replica is a grown replica of an elastic job: a whole GPU held by an
// opportunistic allocation.
type replica struct {
	alloc, node, gpu string
}

// elasticOn reports whether this run grows jobs.
func (s *sim) elasticOn() bool { return s.spec.share == shareModel && s.opts.Elastic.On() }

// elasticRate is running job r's throughput alone on its replicas: its
// measured throughput at min replicas, scaled by the speedup of its grown
// replicas.
func (s *sim) elasticRate(r *running, grown []replica) float64 {
	if len(grown) == 0 {
		return r.iso
	}
	spans := r.multiNode
	base := s.gpuNode[r.gpus[0]]
	for _, g := range grown {
		spans = spans || g.node != base
	}
	c := familyC(r.job.Type, spans)
	return r.iso * speedup(r.job.Scale+len(grown), c) / speedup(r.job.Scale, c)
}

// grow gives idle GPUs to elastic jobs, one replica at a time: each time to
// the job whose expected completion it brings forward the most (a GPU on a
// server the job uses first), net of the resize's pause; a job grows only
// while that is positive. It reports whether any job grew.
func (s *sim) grow() bool {
	idle := s.idleGPUs()
	if len(idle) == 0 {
		return false
	}
	ids := make([]int, 0, len(s.run))
	for id, r := range s.run {
		if r.elastic && r.job.Scale+len(r.grown) < r.max {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	cost := s.opts.Elastic.resizeCost()
	grew := false
	for len(idle) > 0 {
		best, bestGain, bestGPU := -1, 0.0, -1
		for _, id := range ids {
			r := s.run[id]
			if r.job.Scale+len(r.grown) >= r.max {
				continue
			}
			k := s.idleNear(r, idle)
			g := idle[k]
			now := s.elasticRate(r, r.grown)
			next := s.elasticRate(r, append(slices.Clip(r.grown), replica{node: s.gpuNode[g], gpu: g}))
			pair := r.rate / now // what sharing its GPU costs it
			gain := r.rem/r.rate - (r.rem/(next*pair) + cost)
			if gain > bestGain {
				best, bestGain, bestGPU = id, gain, k
			}
		}
		if best < 0 {
			break
		}
		s.addReplica(s.run[best], idle[bestGPU])
		idle = slices.Delete(idle, bestGPU, bestGPU+1)
		grew = true
	}
	return grew
}

// idleGPUs lists the GPUs no job uses, in node order.
func (s *sim) idleGPUs() []string {
	var out []string
	for _, n := range s.snap.Nodes() {
		for i := range n.GPUs {
			if g := &n.GPUs[i]; !g.Down && len(s.onGPU[g.UUID]) == 0 {
				out = append(out, g.UUID)
			}
		}
	}
	return out
}

// idleNear picks, of the idle GPUs, one on a server job r already uses (its
// first replicas' first), else the first.
func (s *sim) idleNear(r *running, idle []string) int {
	for _, g := range r.gpus {
		if k := slices.IndexFunc(idle, func(u string) bool { return s.gpuNode[u] == s.gpuNode[g] }); k >= 0 {
			return k
		}
	}
	return 0
}

// addReplica grows r by one replica on the idle GPU uuid.
func (s *sim) addReplica(r *running, uuid string) {
	n, _ := s.snap.Node(s.gpuNode[uuid])
	spg := devicefn.DefaultSharesPerGPU
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			spg = n.GPUs[i].Shares
		}
	}
	shares := make([]string, spg)
	for k := range shares {
		shares[k] = devicefn.ShareID{UUID: uuid, Index: k}.String()
	}
	s.replicas++
	rep := replica{alloc: fmt.Sprintf("%s[e%06d]", jobKey(r.job.ID).Job, s.replicas), node: n.ID, gpu: uuid}
	a := placement.Alloc{ID: rep.alloc, Node: n.ID, Shares: shares, Class: placement.ClassOpportunistic}
	if p, ok := s.opts.Model.Lookup(r.job.Type); ok {
		a.Profile = p
	}
	if err := s.snap.AddAlloc(a); err != nil {
		panic(err) // the GPU was idle
	}
	s.allocJob[rep.alloc] = r.job.ID
	s.onGPU[uuid] = append(s.onGPU[uuid], r.job.ID)
	pair := r.rate / s.elasticRate(r, r.grown) // what sharing its GPU costs it
	r.grown = append(r.grown, rep)
	r.rate = pair * s.elasticRate(r, r.grown) // until rates() sets it anew
	r.out.Grows++
	s.resized(r)
}

// resized charges r the pause of a resize: ResizeCost seconds of work at
// its new rate alone.
func (s *sim) resized(r *running) {
	r.rem += s.opts.Elastic.resizeCost() * s.elasticRate(r, r.grown)
}

// shrinkFor shrinks the jobs whose grown replicas hold GPUs the step
// placed waiting work on (victims), each by as many replicas, newest
// first.
func (s *sim) shrinkFor(victims []string) {
	count := map[int]int{}
	for _, v := range victims {
		id, ok := s.allocJob[v]
		if !ok {
			panic(fmt.Sprintf("no job holds replica %s", v))
		}
		count[id]++
	}
	ids := make([]int, 0, len(count))
	for id := range count {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := s.run[id]
		for range min(count[id], len(r.grown)) {
			rep := r.grown[len(r.grown)-1]
			r.grown = r.grown[:len(r.grown)-1]
			s.dropReplica(id, rep)
			r.out.Shrinks++
		}
		s.resized(r)
	}
	s.rates()
}

// dropReplica takes a grown replica of job id off the cluster.
func (s *sim) dropReplica(id int, rep replica) {
	if _, err := s.snap.Remove(rep.alloc); err != nil {
		panic(err) // the simulator added it
	}
	delete(s.allocJob, rep.alloc)
	s.onGPU[rep.gpu] = slices.DeleteFunc(s.onGPU[rep.gpu], func(j int) bool { return j == id })
	if len(s.onGPU[rep.gpu]) == 0 {
		delete(s.onGPU, rep.gpu)
	}
}

// lend takes the grown replicas off the snapshot while the decision step
// decides, so that it decides as if their GPUs were idle: they are lent
// capacity that would otherwise idle, and waiting work places as it would
// without them. The returned func puts them back.
func (s *sim) lend() func() {
	if !s.elasticOn() {
		return func() {}
	}
	var lent []placement.Alloc
	for _, id := range s.runningIDs() {
		for _, rep := range s.run[id].grown {
			a, err := s.snap.Remove(rep.alloc)
			if err != nil {
				panic(err) // the simulator added it
			}
			lent = append(lent, a)
		}
	}
	return func() {
		for _, a := range lent {
			if err := s.snap.AddAlloc(a); err != nil {
				panic(err) // the step leaves the snapshot as found
			}
		}
	}
}

// blocking lists the grown replicas on the GPUs that the step's
// placements take.
func (s *sim) blocking(actions []decide.Action) []string {
	if !s.elasticOn() {
		return nil
	}
	on := map[string]string{} // GPU -> grown replica
	for _, r := range s.run {
		for _, rep := range r.grown {
			on[rep.gpu] = rep.alloc
		}
	}
	if len(on) == 0 {
		return nil
	}
	var out []string
	for _, a := range actions {
		if (a.Kind != decide.Pin && a.Kind != decide.Repin) || a.Decision == nil {
			continue
		}
		for _, p := range a.Decision.Placements {
			for _, g := range p.GPUs {
				if rep, ok := on[g]; ok {
					out = append(out, rep)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// runningIDs lists the running jobs, sorted.
func (s *sim) runningIDs() []int {
	ids := make([]int, 0, len(s.run))
	for id := range s.run {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
