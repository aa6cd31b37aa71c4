package placement

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/devicefn/cells"
	"github.com/gpushare/gpushare/scheduler/interference"
)

// Resources are a node's or an allocation's CPU (in the unit the driver
// chooses: MHz for Nomad, milli-cores for the openb traces) and memory.
type Resources struct {
	CPU       int64 `json:"cpu"`
	MemoryMiB int64 `json:"memory_mib"`
}

// gpuGroup is the GPUs of one model on a node, with their cell tree.
type gpuGroup struct {
	// mig marks a group of shared MIG instances (one parent model and
	// profile), each offering cap shares; cap is shares_per_gpu otherwise.
	// First: eval reads them with model and gpus.
	mig   bool
	cap   int
	model string
	// perGPU: Nomad offers each GPU as a device group of its own
	// (pergpu.go).
	perGPU bool
	// multiGPU: a perGPU group whose plugin composes several of its GPUs
	// in one task (devicefn.Group.MultiGPU; pergpu.go).
	multiGPU bool
	// rank is each GPU's rank in its node's cell order, by group-local
	// GPU (devicefn.Group.CellRanks), where the plugin fingerprints it;
	// nil otherwise (nomadpick.go).
	rank   []int
	byRank []int // group-local GPUs by rank, with rank
	gpus   []int // node GPU indices, in group order
	links  devicefn.Matrix
	tree   *cells.Tree
	masks  []uint64 // per cell: bit i set for group-local GPU i
	topoID int      // equal for groups with identical matrices and NUMA
}

// Node is one node of the snapshot. Its fields are read-only: change the
// snapshot through its methods, which keep the policies' caches right.
type Node struct {
	ID       string
	Name     string
	Rack     string
	Meta     map[string]string
	Capacity Resources
	used     Resources
	GPUs     []GPU
	groups   []gpuGroup
	allocs   []*allocRec
	idx      int
	version  uint64
	// mig counts the node's groups of shared MIG instances.
	mig int
	// stage: several whole-GPU allocations of a group may share the node,
	// placed one after the other (SetStaging).
	stage bool
}

// Free returns the node's unused CPU and memory.
func (n *Node) Free() Resources {
	return Resources{CPU: n.Capacity.CPU - n.used.CPU, MemoryMiB: n.Capacity.MemoryMiB - n.used.MemoryMiB}
}

// FreeShares is the number of free shares over all the node's GPUs.
func (n *Node) FreeShares() int {
	s := 0
	for i := range n.GPUs {
		s += n.GPUs[i].free
	}
	return s
}

// gpusIdle reports whether no share of the node's GPUs is in use.
func (n *Node) gpusIdle() bool {
	for i := range n.GPUs {
		if !n.GPUs[i].Idle() {
			return false
		}
	}
	return true
}

// Class is the class of a job: production jobs have a slowdown bound,
// opportunistic jobs may be preempted.
type Class string

// Classes of jobs (gpushare.class).
const (
	ClassNormal        Class = ""
	ClassProduction    Class = "production"
	ClassOpportunistic Class = "opportunistic"
)

// Alloc is a running allocation as the snapshot knows it.
type Alloc struct {
	ID     string    `json:"id"`
	Node   string    `json:"node"`
	Shares []string  `json:"shares"`
	Res    Resources `json:"resources"`
	VC     string    `json:"vc,omitempty"`
	Class  Class     `json:"class,omitempty"`
	// Profile is the job's interference profile (zero when unknown).
	Profile interference.Profile `json:"profile"`
	// MaxSlowdown is the production bound; 0 means the snapshot's default.
	MaxSlowdown float64 `json:"max_slowdown,omitempty"`
	// Timeslice marks a time-sliced allocation (Request.Timeslice): a GPU
	// that holds one holds no other kind.
	Timeslice bool `json:"timeslice,omitempty"`
}

type allocRec struct {
	Alloc
	node   *Node
	gpus   []int   // node GPU indices
	shares [][]int // share indices per entry of gpus
	milli  int     // GPU use in thousandths of a GPU
	model  string  // model of its GPUs ("" for CPU-only)
}

// Snapshot is the cluster as the placement core sees it. It is not safe for
// concurrent use; the driver owns it.
type Snapshot struct {
	nodes   []*Node
	byID    map[string]*Node
	allocs  map[string]*allocRec
	byUUID  map[string]gpuRef
	log     []int32 // node indices in order of change
	gen     uint64  // public changes only (not the tries of Decide)
	placed  int     // allocations Apply added as Decide placed them (placed.go)
	epoch   uint64  // bumped when nodes are added
	topos   map[string]int
	maxCPU  int64
	maxGPUs int
	// instances counts the shared MIG instances of the nodes.
	instances int
	// vc usage: guaranteed milli-GPUs per VC per model.
	vcUse map[string]map[string]int
	// capacity: milli-GPUs per model.
	capacity map[string]int
	// opportunistic counts the opportunistic allocations.
	opportunistic int
	// DefaultMaxSlowdown bounds production jobs without their own bound.
	DefaultMaxSlowdown float64
}

type gpuRef struct {
	node *Node
	gpu  int
}

// DefaultMaxSlowdown is the slowdown bound of production jobs (10%).
const DefaultMaxSlowdown = 0.10

// NewSnapshot returns an empty cluster.
func NewSnapshot() *Snapshot {
	return &Snapshot{
		byID: map[string]*Node{}, allocs: map[string]*allocRec{}, byUUID: map[string]gpuRef{},
		topos: map[string]int{}, vcUse: map[string]map[string]int{}, capacity: map[string]int{},
		DefaultMaxSlowdown: DefaultMaxSlowdown,
	}
}

// Errors of snapshot updates.
var (
	ErrDuplicate = errors.New("already in the snapshot")
	ErrUnknown   = errors.New("not in the snapshot")
	ErrConflict  = errors.New("conflicts with the snapshot")
	ErrBadNode   = errors.New("invalid node")
)

// Nodes returns the nodes in the order they were added.
func (s *Snapshot) Nodes() []*Node { return s.nodes }

// Node returns a node by ID.
func (s *Snapshot) Node(id string) (*Node, bool) { n, ok := s.byID[id]; return n, ok }

// Allocs returns the running allocations sorted by ID.
func (s *Snapshot) Allocs() []Alloc {
	out := make([]Alloc, 0, len(s.allocs))
	for _, a := range s.allocs {
		out = append(out, a.Alloc)
	}
	slices.SortFunc(out, func(a, b Alloc) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Alloc returns a running allocation by ID.
func (s *Snapshot) Alloc(id string) (Alloc, bool) {
	a, ok := s.allocs[id]
	if !ok {
		return Alloc{}, false
	}
	return a.Alloc, true
}

// Version is a counter that changes whenever the snapshot does.
// Decide's own tries, undone before it returns, do not count.
func (s *Snapshot) Version() uint64 { return s.gen }

// Epoch changes whenever a node is added or removed (a node that changed
// is removed and added again): what the nodes are, their capacity and
// their GPUs, is the same while it does not (their health and use may
// not be).
func (s *Snapshot) Epoch() uint64 { return s.epoch }

func (s *Snapshot) touch(n *Node) {
	n.version++
	s.log = append(s.log, int32(n.idx))
}

// AddNode adds a node built by NodeFromGroups or NodeFromSpec.
func (s *Snapshot) AddNode(n *Node) error {
	if n.ID == "" {
		return fmt.Errorf("%w: node has no ID", ErrBadNode)
	}
	if _, dup := s.byID[n.ID]; dup {
		return fmt.Errorf("node %q: %w", n.ID, ErrDuplicate)
	}
	for i := range n.GPUs {
		if _, dup := s.byUUID[n.GPUs[i].UUID]; dup {
			return fmt.Errorf("node %q GPU %q: %w", n.ID, n.GPUs[i].UUID, ErrDuplicate)
		}
	}
	for gi := range n.groups {
		g := &n.groups[gi]
		key := g.model + "|" + fmt.Sprint(g.links) + fmt.Sprint(numaOf(n, g))
		id, ok := s.topos[key]
		if !ok {
			id = len(s.topos)
			s.topos[key] = id
		}
		g.topoID = id
	}
	n.idx = len(s.nodes)
	s.nodes = append(s.nodes, n)
	s.byID[n.ID] = n
	for i := range n.GPUs {
		s.byUUID[n.GPUs[i].UUID] = gpuRef{n, i}
		s.capacity[n.GPUs[i].Model] += n.GPUs[i].milliCap()
		if n.GPUs[i].inst {
			s.instances++
		}
	}
	s.maxCPU = max(s.maxCPU, n.Capacity.CPU)
	s.maxGPUs = max(s.maxGPUs, len(n.GPUs))
	s.epoch++
	s.gen++
	s.touch(n)
	return nil
}

// RemoveNode deletes a node and the allocations on it (a node that left the
// cluster, with its allocations lost), returning those allocations.
func (s *Snapshot) RemoveNode(id string) ([]Alloc, error) {
	n, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, ErrUnknown)
	}
	var lost []Alloc
	for len(n.allocs) > 0 {
		a, _ := s.remove(n.allocs[0].ID)
		lost = append(lost, a)
	}
	slices.SortFunc(lost, func(a, b Alloc) int { return strings.Compare(a.ID, b.ID) })
	for i := range n.GPUs {
		delete(s.byUUID, n.GPUs[i].UUID)
		if n.GPUs[i].inst {
			s.instances--
		}
		s.capacity[n.GPUs[i].Model] -= n.GPUs[i].milliCap()
		if s.capacity[n.GPUs[i].Model] == 0 {
			delete(s.capacity, n.GPUs[i].Model)
		}
	}
	delete(s.byID, id)
	s.nodes = slices.Delete(s.nodes, n.idx, n.idx+1)
	s.maxCPU, s.maxGPUs = 0, 0
	for i, m := range s.nodes {
		m.idx = i
		s.maxCPU = max(s.maxCPU, m.Capacity.CPU)
		s.maxGPUs = max(s.maxGPUs, len(m.GPUs))
	}
	// Node indices changed: the log restarts and policies rebuild.
	s.log = s.log[:0]
	s.epoch++
	s.gen++
	return lost, nil
}

func numaOf(n *Node, g *gpuGroup) []int {
	out := make([]int, len(g.gpus))
	for i, gi := range g.gpus {
		out[i] = n.GPUs[gi].NUMA
	}
	return out
}

// AddAlloc records a running allocation with its exact share IDs (as Nomad
// reports it). A share must not be in use already.
func (s *Snapshot) AddAlloc(a Alloc) error {
	if err := s.addAlloc(a); err != nil {
		return err
	}
	s.gen++
	return nil
}

func (s *Snapshot) addAlloc(a Alloc) error {
	if err := s.newID(a); err != nil {
		return err
	}
	n, ok := s.byID[a.Node]
	if !ok {
		return fmt.Errorf("allocation %q: node %q: %w", a.ID, a.Node, ErrUnknown)
	}
	rec := &allocRec{Alloc: a, node: n}
	rec.Shares = slices.Clone(a.Shares)
	// Mark shares as they are checked (catching repeats within the
	// allocation), then clear the marks: commit sets them for good.
	type mark struct{ gpu, idx int }
	marks := make([]mark, 0, len(a.Shares))
	defer func() {
		for _, m := range marks {
			n.GPUs[m.gpu].setUsed(m.idx, false)
		}
	}()
	lastUUID, lastGPU := "", -1
	for _, id := range a.Shares {
		sid, err := devicefn.ParseShareID(id)
		if err != nil {
			return fmt.Errorf("allocation %q: %w", a.ID, err)
		}
		if sid.UUID != lastUUID {
			ref, ok := s.byUUID[sid.UUID]
			if !ok || ref.node != n {
				return fmt.Errorf("allocation %q: share %s: GPU %s is not on node %q: %w", a.ID, id, sid.UUID, n.ID, ErrUnknown)
			}
			lastUUID, lastGPU = sid.UUID, ref.gpu
		}
		g := &n.GPUs[lastGPU]
		if sid.Index >= g.Cap {
			return fmt.Errorf("allocation %q: share %s: GPU %s has only %d shares: %w", a.ID, id, sid.UUID, g.Cap, ErrUnknown)
		}
		if g.isUsed(sid.Index) {
			return fmt.Errorf("allocation %q: share %s is already in use: %w", a.ID, id, ErrConflict)
		}
		g.setUsed(sid.Index, true)
		marks = append(marks, mark{lastGPU, sid.Index})
		if !slices.Contains(rec.gpus, lastGPU) {
			rec.gpus = append(rec.gpus, lastGPU)
		}
	}
	// each GPU's share indices, in the order given, cut from one slice
	rec.shares = make([][]int, len(rec.gpus))
	all := make([]int, 0, len(marks))
	for k, gi := range rec.gpus {
		from := len(all)
		for _, m := range marks {
			if m.gpu == gi {
				all = append(all, m.idx)
			}
		}
		rec.shares[k] = all[from:len(all):len(all)]
	}
	if err := fits(a, n); err != nil {
		return err
	}
	for _, m := range marks {
		n.GPUs[m.gpu].setUsed(m.idx, false)
	}
	marks = nil
	s.commit(rec)
	return nil
}

// newID checks that a names an allocation the snapshot does not hold.
func (s *Snapshot) newID(a Alloc) error {
	if a.ID == "" {
		return fmt.Errorf("%w: allocation has no ID", ErrConflict)
	}
	if _, dup := s.allocs[a.ID]; dup {
		return fmt.Errorf("allocation %q: %w", a.ID, ErrDuplicate)
	}
	return nil
}

// fits checks a's CPU and memory against what node n has free.
func fits(a Alloc, n *Node) error {
	if a.Res.CPU < 0 || a.Res.MemoryMiB < 0 {
		return fmt.Errorf("allocation %q: negative resources: %w", a.ID, ErrConflict)
	}
	if free := n.Free(); a.Res.CPU > free.CPU || a.Res.MemoryMiB > free.MemoryMiB {
		return fmt.Errorf("allocation %q needs cpu %d and memory %d MiB but node %q has %d and %d MiB free: %w",
			a.ID, a.Res.CPU, a.Res.MemoryMiB, n.ID, free.CPU, free.MemoryMiB, ErrConflict)
	}
	return nil
}

func (s *Snapshot) commit(rec *allocRec) {
	n := rec.node
	for k, gi := range rec.gpus {
		g := &n.GPUs[gi]
		for _, idx := range rec.shares[k] {
			g.setUsed(idx, true)
		}
		g.free -= len(rec.shares[k])
		if rec.Timeslice {
			g.ts++
		}
		g.allocs = insertRec(g.allocs, rec)
		rec.milli += len(rec.shares[k]) * 1000 / g.Shares
		rec.model = g.Model
	}
	n.used.CPU += rec.Res.CPU
	n.used.MemoryMiB += rec.Res.MemoryMiB
	n.allocs = insertRec(n.allocs, rec)
	s.allocs[rec.ID] = rec
	if rec.Class == ClassOpportunistic {
		s.opportunistic++
	}
	if rec.Class != ClassOpportunistic && rec.milli > 0 {
		m := s.vcUse[rec.VC]
		if m == nil {
			m = map[string]int{}
			s.vcUse[rec.VC] = m
		}
		m[rec.model] += rec.milli
	}
	s.touch(n)
}

// Remove deletes a running allocation and frees its shares, CPU and memory.
func (s *Snapshot) Remove(id string) (Alloc, error) {
	a, err := s.remove(id)
	if err == nil {
		s.gen++
	}
	return a, err
}

func (s *Snapshot) remove(id string) (Alloc, error) {
	rec, ok := s.allocs[id]
	if !ok {
		return Alloc{}, fmt.Errorf("allocation %q: %w", id, ErrUnknown)
	}
	n := rec.node
	for k, gi := range rec.gpus {
		g := &n.GPUs[gi]
		for _, idx := range rec.shares[k] {
			g.setUsed(idx, false)
		}
		g.free += len(rec.shares[k])
		if rec.Timeslice {
			g.ts--
		}
		g.allocs = deleteRec(g.allocs, rec)
	}
	n.used.CPU -= rec.Res.CPU
	n.used.MemoryMiB -= rec.Res.MemoryMiB
	n.allocs = deleteRec(n.allocs, rec)
	delete(s.allocs, id)
	if rec.Class == ClassOpportunistic {
		s.opportunistic--
	}
	if rec.Class != ClassOpportunistic && rec.milli > 0 {
		s.vcUse[rec.VC][rec.model] -= rec.milli
	}
	s.touch(n)
	return rec.Alloc, nil
}

// insertRec adds rec keeping the list sorted by allocation ID, so that the
// state does not depend on the order of past changes.
func insertRec(list []*allocRec, rec *allocRec) []*allocRec {
	i, _ := slices.BinarySearchFunc(list, rec.ID, func(a *allocRec, id string) int { return strings.Compare(a.ID, id) })
	return slices.Insert(list, i, rec)
}

// deleteRec removes rec keeping the order of the others.
func deleteRec(list []*allocRec, rec *allocRec) []*allocRec {
	if i := slices.Index(list, rec); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

// Apply carries out a decision: it stops the preempted allocations, then
// adds one allocation per placement. A decision must be applied to the
// snapshot it was made on; on error the snapshot is left unchanged.
func (s *Snapshot) Apply(d *Decision) error {
	if !d.Placed() {
		return fmt.Errorf("decision for %q was a refusal: %s", d.Request, d.Refusal)
	}
	var removed []Alloc
	var added []string
	undo := func() {
		for _, id := range added {
			_, _ = s.Remove(id)
		}
		for _, a := range removed {
			_ = s.AddAlloc(a)
		}
	}
	for _, id := range d.Preempt {
		a, err := s.Remove(id)
		if err != nil {
			undo()
			return fmt.Errorf("apply %q: preempt: %w", d.Request, err)
		}
		removed = append(removed, a)
	}
	for _, p := range d.Placements {
		add := s.AddAlloc
		if p.at.applies(s, d, &p) {
			add = func(a Alloc) error { return s.addPlaced(a, p.at) }
		}
		if err := add(p.alloc()); err != nil {
			undo()
			return fmt.Errorf("apply %q: %w", d.Request, err)
		}
		added = append(added, p.AllocID)
	}
	return nil
}

// label names a node in reasons: its name, as the GPU map shows it, else
// its ID.
func (n *Node) label() string {
	if n.Name != "" {
		return n.Name
	}
	return n.ID
}
