package decide

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
)

// Group is one group to decide: waiting at the gate, adopted, or pinned to
// capacity that is gone.
type Group struct {
	Key Key
	// Req is the group's request; Req.ID names its allocations.
	Req placement.Request
	// Submit is when the job was submitted (zero: unknown, counts as just
	// submitted).
	Submit time.Time
	// Bound is the latest start the wait bound allows the group: when it
	// would have started had the cluster been run exclusively, first come
	// first served, or later while its completion stays within that
	// schedule's tail (queue.Shadow.Bound; zero: no bound). Under
	// Config.WaitBound a group past its bound goes before every group
	// that is not. The service keeps no such shadow (it would need the
	// queue's history since the cluster started) and sets none.
	Bound time.Time
	// Repin marks a pinned group whose pinned capacity is gone or whose
	// GPU turned unhealthy before its allocation ran.
	Repin bool
	// Replaces are allocations of an older version of the group whose
	// shares the decision may take: Nomad stops them in the same plan.
	Replaces []string
	// Keep is where the group's allocations (those of Replaces) run now,
	// when the group was re-registered unchanged in everything the
	// decision depends on: the step places it there again when the
	// snapshot still allows it (a Pin with Kept set), so that its
	// allocations are updated in place rather than replaced.
	Keep []placement.Held
	// Apart names the groups (those of one job with distinct_hosts at job
	// level) that never share a node: a group of it placed by this step
	// keeps the next ones off its nodes.
	Apart string
	// Prefer is where the group's single running allocation (of
	// Replaces) runs, when the group's request changed: the step keeps it
	// on those GPUs when they still fit the new request (a Pin), rather
	// than moving it wherever the policy would put a new group.
	Prefer []placement.Held
	// Stay are allocations of a group pinned by node (pin.ContractNode)
	// that stay where they run when it is pinned again (scaled, or moved
	// off a node it lost): a pin naming their nodes is checked in place,
	// so Nomad keeps them. The step decides only the others (the count
	// less these), off their nodes when the group's allocations keep
	// apart, and the decision names these too, first.
	Stay []placement.Held
}

// Config is what the configuration says about deciding.
type Config struct {
	// DefaultExpected is the run time of a group that declares none (and
	// has none learned from its previous runs: placement.Request's
	// LearnedFrom, filled by the service).
	DefaultExpected time.Duration
	// Reservations lets the first waiting multi-GPU group that does not
	// fit hold the nodes that free first for it (EASY backfilling). Only a
	// group whose run time is known (declared, or learned from its
	// previous runs) holds nodes: with none the ends are guesses, and
	// holding nodes on guesses idles them.
	Reservations bool
	// WaitBound bounds every group's wait by its Group.Bound: groups past
	// it go first, in submission order, and the first of them that does
	// not fit holds the nodes that free first for it however long they
	// take (with Reservations). It keeps a group from waiting longer than
	// it would have with no sharing and no reordering at all.
	WaitBound bool
	// ShortestFirst orders the queue (after the groups past their bound,
	// under WaitBound) by expected run time, shortest first (SJF), in place
	// of the highest response ratio. Without WaitBound it may starve a long
	// group.
	ShortestFirst bool
	// IdleFirst gives a fractional group of one allocation a GPU nobody
	// uses when one is free (its shares are still what it asked for), and
	// shares a GPU only when none is: Gandiva's packing under contention,
	// for training clusters. Off, the placement core packs fractions by
	// fragmentation (FGD), for inference clusters.
	IdleFirst bool
	// ObserveWithin is how soon introspection sees a pair's progress and
	// unpairs it when it loses (0: never, or no introspection). It bounds
	// what a pairing the prediction was wrong about can cost: sharing is
	// then weighed on the expected gain against that bounded cost, not on
	// the pessimistic outcome alone (see worthSharing).
	ObserveWithin time.Duration
	// MaxStretch bounds what sharing costs a job over its life: a GPU is
	// not shared with an allocation that has already lost more than this
	// share of its run time alone to sharing (Input.Stretched). The
	// slowdown bound holds instant by instant; this keeps a long job from
	// being slowed by one partner after another until it ends far later
	// than alone, the jobs a completion-time tail is made of. 0: no bound.
	MaxStretch float64
	// VCs names the virtual clusters with guaranteed capacity; a group
	// naming another is not guaranteed and does not go first.
	VCs []string
	// MaxSlowdown is the slowdown bound of production jobs that declare
	// none (0: the snapshot's default), which introspection checks.
	MaxSlowdown float64
	// InPlacePins pins by node alone every decision Nomad itself keeps on
	// one GPU per allocation, or on several whole GPUs where the plugin
	// composes them (placement.Snapshot.NomadChoosesGPU: nodes whose
	// plugin offers each GPU as a device group), with the GPUs Nomad
	// takes there, the first with room in the order the pin's fixed
	// affinities give (the node's cell order, or index order for a group
	// an older pin gave index affinities: placement.Request.NomadIndexOrder;
	// placement.Snapshot.NomadPicksFirstGPU): the step decides what Nomad
	// will do, and marks the decision InPlace.
	InPlacePins bool
}

// Input is the world Step decides on.
type Input struct {
	// Snapshot is the cluster: nodes with GPU health, allocations, and the
	// holds of pinned groups not yet allocated. Step leaves it as found.
	Snapshot *placement.Snapshot
	Groups   []Group
	// Ends is when each allocation of the snapshot is expected to end,
	// from a declared run time (queue.Left, after now); one not listed
	// declared none, and it and one whose end is not after now (late) are
	// expected to end DefaultExpected from now.
	Ends map[string]time.Time
	Now  time.Time
	// Compatible reports whether group g may share a GPU with allocation
	// alloc (nil: always), for facts the placement core does not model,
	// such as the simulator's measured memory fit of two job types.
	Compatible func(g Key, alloc string) bool
	// Running is what was observed of allocations that share a GPU, by
	// allocation ID: a production job seen slower than its bound makes the
	// step unpair its GPU first (see Unpair). Only a listed allocation is
	// ever moved: the executor leaves out those it may not stop (of
	// namespaces it does not manage), which stay as neighbours.
	Running map[string]Running
	// Stretched is, by allocation, the share of its run time alone that
	// sharing has cost it so far: the time it ran shared, weighted by one
	// less its throughput there, over its run time alone (observed; an
	// allocation not listed has lost nothing known). Config.MaxStretch
	// reads it.
	Stretched map[string]float64
}

// Step decides every group once, in queue order, on the snapshot as
// changed by the decisions before it, and returns the actions. It is
// pure: the same input gives the same actions.
func Step(pol placement.Policy, in Input, cfg Config) []Action {
	out, restore := StepThenRestore(pol, in, cfg)
	restore()
	return out
}

// StepThenRestore is Step, but it returns before it puts the snapshot
// back as found (its placements taken out, the allocations it released
// put back, the last first): restore does, once, and the caller runs it
// before it reads or changes the snapshot again, such as beside what it
// does with the actions. A step that panics puts it back itself.
func StepThenRestore(pol placement.Policy, in Input, cfg Config) (actions []Action, restore func()) {
	st := &step{pol: pol, in: in, cfg: cfg, snap: in.Snapshot, ends: map[string]time.Time{}, placedDeclared: map[string]bool{}}
	decided := false
	defer func() {
		if !decided {
			st.undo()
		}
	}()
	actions = st.decide()
	decided = true
	return actions, st.undo
}

// decide is Step's work, leaving its changes to the snapshot for undo.
func (st *step) decide() []Action {
	pol, in, cfg := st.pol, st.in, st.cfg
	queue := order(in.Groups, in.Now, cfg)
	out := st.introspect()
	failed := map[string]*placement.Refusal{} // request shapes refused since the last placement
	var held map[string]time.Time             // nodes reserved for heldFor
	var heldFor Key
	apart := map[string][]string{} // nodes this step gave each Apart set
	for i, q := range queue {
		g := q.Group
		req := g.Req
		if len(g.Stay) > 0 {
			req.Count = max(req.Count-len(g.Stay), 0)
			req.Already = map[string]int{} // the others spread around them
			for _, h := range g.Stay {
				req.Already[h.Node]++
				if req.DistinctNodes {
					req.Avoid = append(slices.Clip(req.Avoid), h.Node)
				}
			}
		}
		restored := st.release(g.Replaces)
		avoided := backfill(held, in.Now, st.expected(req))
		if len(avoided) > 0 {
			req.Avoid = append(slices.Clip(req.Avoid), avoided...)
		}
		if g.Apart != "" {
			req.Avoid = append(slices.Clip(req.Avoid), apart[g.Apart]...)
		}
		// a request decided on the snapshot as it is: a shape refused is
		// not decided again until something is placed. Its shape is made
		// only to be looked up or kept (most steps refuse nothing)
		shaped, shape := len(restored) == 0, ""
		if shaped && len(failed) > 0 {
			shape = shapeOf(req)
		}
		var d *placement.Decision
		kept := false
		if len(g.Keep) > 0 && len(restored) > 0 {
			if k, err := st.snap.Keep(&g.Req, pol.Name(), g.Keep); err == nil { // a reservation's hold does not move what runs
				d, kept = k, true
			}
		} else if len(g.Prefer) > 0 && len(restored) > 0 {
			if p, err := st.snap.Prefer(&g.Req, pol.Name(), g.Prefer); err == nil {
				d = p
			}
		}
		switch ref, ok := failed[shape]; {
		case d != nil:
		case ok && shape != "":
			d = &placement.Decision{Request: req.ID, Policy: pol.Name(), Refusal: ref}
		default:
			d = st.place(g.Key, req)
		}
		if !d.Placed() {
			st.restore(restored)
			if shaped {
				if shape == "" {
					shape = shapeOf(req)
				}
				failed[shape] = d.Refusal
			}
			if never := st.never(d.Refusal, req); never != nil {
				fix := "change the request (or add nodes that can hold it)"
				if never.Code == placement.RefusedInvalid {
					fix = "change the request" // no node could ever hold it
				}
				out = append(out, Action{Kind: Refuse, Group: g.Key, Refusal: never,
					Reason: never.String() + "; this cluster can never hold it: " + fix})
				continue
			}
			w := Action{Kind: Wait, Group: g.Key, Refusal: d.Refusal, Position: i + 1, Of: len(queue), Ratio: q.ratio}
			w.Reason = fmt.Sprintf("%s; position %d of %d in the queue (response ratio %.2f%s)", d.Refusal, i+1, len(queue), q.ratio, learnedNote(req))
			if rule := placement.OnePerNode(st.snap, req); rule != "" {
				w.Reason += "; " + rule
			}
			if len(avoided) > 0 {
				w.Reason += fmt.Sprintf("; %d node(s) are held for %s, which waits ahead of it, and this group would not end before", len(avoided), heldFor)
			}
			var reserve *Action
			if held == nil && cfg.Reservations && req.Expected > 0 && reservable(d) {
				if held = st.reserveFor(req, q.overdue); held != nil {
					heldFor = g.Key
					w.Reason += "; " + heldReason(held, in.Now)
					reserve = &Action{Kind: Reserve, Group: g.Key, Hold: held, Reason: heldReason(held, in.Now)}
				}
			}
			out = append(out, w)
			st.ahead++
			if reserve != nil {
				out = append(out, *reserve)
			}
			continue
		}
		if len(d.Preempt) > 0 {
			out = append(out, Action{Kind: Preempt, Group: g.Key, Allocs: slices.Clone(d.Preempt)})
		}
		kind := Pin
		if g.Repin {
			kind = Repin
		}
		out = append(out, Action{Kind: kind, Group: g.Key, Decision: d, Kept: kept, Position: i + 1, Of: len(queue), Ratio: q.ratio})
		if len(restored) > 0 {
			st.done = append(st.done, func() { st.restore(restored) }) // undone after the placement
		}
		st.apply(d, st.expected(req), req.Expected > 0)
		if len(g.Stay) > 0 { // in the snapshot already: named, not applied again
			d.Placements = append(stayPlacements(g.Stay), d.Placements...)
		}
		d.PerGPU = st.snap.NomadChoosesGPU(d)
		d.InPlace = st.cfg.InPlacePins && d.PerGPU
		if g.Apart != "" {
			for _, p := range d.Placements {
				apart[g.Apart] = append(apart[g.Apart], p.Node)
			}
		}
		clear(failed)
	}
	return out
}

// step is the state of one Step: what it changed on the snapshot, to undo.
type step struct {
	pol  placement.Policy
	in   Input
	cfg  Config
	snap *placement.Snapshot
	// ends adds the expected ends of this step's placements to in.Ends,
	// and placedDeclared those that come from a declared run time.
	ends           map[string]time.Time
	placedDeclared map[string]bool
	// done undoes the step's changes to the snapshot, last first.
	done []func()
	// gpuEnd caches when each GPU frees (see reserveFor); nil until used.
	gpuEnd map[string]time.Time
	rooms  map[string]map[string]time.Time
	// frees caches freeAt until the snapshot changes; ahead counts the
	// groups this step left waiting so far.
	frees []float64
	ahead int
	// spgs caches sharesPerGPU: the step adds and removes allocations,
	// never nodes.
	spgs []int
}

func (st *step) undo() {
	for i := len(st.done) - 1; i >= 0; i-- {
		st.done[i]()
	}
	st.done = nil // undone once
}

// release takes a group's older allocations out of the snapshot, so that
// its new version may take their shares; restore puts them back.
func (st *step) release(ids []string) []placement.Alloc {
	st.frees = nil
	var out []placement.Alloc
	for _, id := range ids {
		if a, err := st.snap.Remove(id); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func (st *step) restore(as []placement.Alloc) {
	st.frees = nil
	for _, a := range as {
		_ = st.snap.AddAlloc(a)
	}
}

// apply keeps a placement on the snapshot for the rest of the step.
func (st *step) apply(d *placement.Decision, expected time.Duration, declared bool) {
	var stopped []placement.Alloc
	for _, id := range d.Preempt {
		if a, ok := st.snap.Alloc(id); ok {
			stopped = append(stopped, a)
		}
	}
	if err := st.snap.Apply(d); err != nil {
		return // the core decided on this snapshot: cannot happen
	}
	end := st.in.Now.Add(expected)
	for _, p := range d.Placements {
		st.ends[p.AllocID] = end
		if declared {
			st.placedDeclared[p.AllocID] = true
		}
		if st.gpuEnd != nil {
			for _, g := range p.GPUs {
				st.gpuEnd[g] = later(st.gpuEnd[g], end)
			}
		}
	}
	clear(st.rooms)
	st.frees = nil
	st.done = append(st.done, func() {
		for _, p := range d.Placements {
			_, _ = st.snap.Remove(p.AllocID)
		}
		st.restore(stopped)
	})
}

// place asks the placement core, first for an idle GPU when IdleFirst
// says so, and steers it away from nodes where the group could not share
// with what runs on the chosen GPU.
func (st *step) place(g Key, req placement.Request) *placement.Decision {
	var d *placement.Decision // the core's own choice, once asked for
	if st.cfg.IdleFirst && req.Count == 1 && req.Shares > 0 {
		// a shared MIG instance it fills is a GPU nobody else uses, and
		// the core's best fit: taken before a whole GPU is broken into
		if st.snap.HasMIGInstances() {
			if d = st.core(req); d.Placed() && st.snap.FillsInstance(&d.Placements[0]) {
				return d
			}
		}
		for _, spg := range st.sharesPerGPU() {
			if req.Shares >= spg {
				continue
			}
			whole := req
			whole.Shares = spg
			if d := st.core(whole); d.Placed() && len(d.Placements[0].Shares) == spg {
				p := &d.Placements[0]
				p.Shares = p.Shares[:req.Shares:req.Shares]
				return d
			}
		}
	}
	if d == nil {
		d = st.core(req)
	}
	if st.cfg.IdleFirst {
		d = st.worthSharing(req, d)
	}
	if st.in.Compatible == nil && st.cfg.MaxStretch <= 0 || req.Count != 1 {
		return d
	}
	var steered [2]int // nodes avoided for a partner: by Compatible, by MaxStretch
	for range st.snap.Nodes() {
		if !d.Placed() {
			return steeredRefusal(d, steered, st.cfg.MaxStretch)
		}
		p := d.Placements[0]
		why := st.compatible(g, p.GPUs)
		if why == partnerOK {
			return d
		}
		steered[why-1]++
		req.Avoid = append(slices.Clip(req.Avoid), p.Node)
		if d = st.core(req); st.cfg.IdleFirst {
			d = st.worthSharing(req, d) // weighed as the first choice was
		}
	}
	return steeredRefusal(d, steered, st.cfg.MaxStretch)
}

// stayPlacements are the placements of allocations that stay where they
// run (Group.Stay). They have no allocation ID of the step's: the step's
// undo removes only what it placed.
func stayPlacements(stay []placement.Held) []placement.Placement {
	out := make([]placement.Placement, 0, len(stay))
	for _, h := range stay {
		var gpus []string
		for _, sh := range h.Shares {
			if id, err := devicefn.ParseShareID(sh); err == nil && !slices.Contains(gpus, id.UUID) {
				gpus = append(gpus, id.UUID)
			}
		}
		slices.Sort(gpus)
		out = append(out, placement.Placement{Node: h.Node, GPUs: gpus, Shares: slices.Clone(h.Shares),
			Reason: "stays where it runs (its node stays in the pin: Nomad keeps it in place)", Predicted: 1, PredictedMate: 1})
	}
	return out
}

// core asks the placement core; under InPlacePins a decision Nomad
// keeps on one GPU per allocation takes the GPU Nomad will take, and the
// core ranks the nodes for several whole GPUs by the GPUs Nomad will
// take there (placement.Request.NomadPicksFirst).
func (st *step) core(req placement.Request) *placement.Decision {
	req.NomadPicksFirst = st.cfg.InPlacePins
	d := st.pol.Decide(st.snap, req)
	if st.cfg.InPlacePins && len(d.Placements) == 1 && st.snap.NomadChoosesGPU(d) {
		st.snap.NomadPicksFirstGPU(d)
	}
	return d
}

// sharesPerGPU lists the distinct shares_per_gpu of the cluster's GPUs.
func (st *step) sharesPerGPU() []int {
	if st.spgs != nil {
		return st.spgs
	}
	out := []int{}
	for _, n := range st.snap.Nodes() {
		for i := range n.GPUs {
			if s := n.GPUs[i].Shares; !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	st.spgs = out
	return out
}

// never returns why a refused group can never be placed on this
// cluster, or nil when it may fit later.
func (st *step) never(ref *placement.Refusal, req placement.Request) *placement.Refusal {
	if ref == nil {
		return nil
	}
	switch ref.Code {
	case placement.RefusedInvalid, placement.RefusedNoModel, placement.RefusedTooLarge, placement.RefusedOverQuota:
		return ref
	}
	// a quota in use frees (RefusedQuota): it waits unless the cluster
	// itself could never hold it
	return placement.Impossible(st.snap, req)
}

// expected is a request's expected run time: declared, else the default.
func (st *step) expected(r placement.Request) time.Duration {
	if r.Expected > 0 {
		return r.Expected
	}
	return st.cfg.DefaultExpected
}

// shapeOf keys a request by everything a placement depends on except its
// name, so that a shape refused once is not decided again in the same
// step until something is placed.
func shapeOf(r placement.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%d|%d|%d|%s|%s|%s|%v|%v|", r.Count, r.Shares, r.Res.CPU, r.Res.MemoryMiB,
		strings.Join(r.Models, ","), r.VC, r.Class, r.Profile, r.MaxSlowdown)
	for _, a := range r.Avoid {
		b.WriteString(a)
		b.WriteByte(',')
	}
	b.WriteString(strconv.Itoa(len(r.Avoid)))
	b.WriteString(allowedKey(r.Allowed)) // the job's own rules: requests allowing other nodes differ
	if r.DistinctNodes {
		b.WriteString("|distinct")
	}
	if r.Pack {
		b.WriteString("|pack")
	}
	if r.Batch {
		b.WriteString("|batch") // never staged
	}
	if u := r.Unstaged; u != nil { // staged on fewer nodes
		h := fnv.New64a()
		for _, id := range slices.Sorted(maps.Keys(u.Nodes)) {
			fmt.Fprintf(h, "%s,", id)
		}
		fmt.Fprintf(&b, "|unstaged %t %x", u.Nodes == nil, h.Sum64())
	}
	fmt.Fprintf(&b, "|hold %d %d", r.HoldRes.CPU, r.HoldRes.MemoryMiB)
	for _, l := range r.Limits {
		// the same rule over the same nodes, as the job's allocations leave it
		h := fnv.New64a()
		for _, id := range slices.Sorted(maps.Keys(l.Of)) {
			fmt.Fprintf(h, "%s=%s,", id, l.Of[id])
		}
		for _, v := range slices.Sorted(maps.Keys(l.Left)) {
			fmt.Fprintf(h, "%s:%d,", v, l.Left[v])
		}
		fmt.Fprintf(&b, "|limit %s %d %x", l.Property, l.Max, h.Sum64())
	}
	return b.String()
}

// allowedKey identifies a request's Allowed set ("" when it allows every
// node).
func allowedKey(ids []string) string {
	if ids == nil {
		return ""
	}
	h := fnv.New64a()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{','})
	}
	return fmt.Sprintf("|allowed %d:%x", len(ids), h.Sum64())
}
