package service

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"
	"weak"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/gpushare/gpushare/scheduler/queue"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// reconcile is one pass of the decision loop: build the step's input from
// the model, let decide.Step choose the actions, execute them against
// Nomad.
//
// The pass holds s.mu only to begin and to end its read of the model
// (reading.go): in between, the model is written by no one (what the
// event stream brings meanwhile waits, in order, until the read ends),
// so the pass reads a consistent view of it while the HTTP API, the page
// and introspection read beside it. Snapshot and collect look again only
// at what changed (collect_cache.go). The placement snapshot and
// collect's cache are the loop goroutine's own (only a pass changes
// them): the step, the actions and the pins run on them without the lock.
func (s *loop) reconcile(ctx context.Context) {
	s.mu.Lock()
	locked := time.Now()
	if !s.synced {
		s.mu.Unlock()
		return
	}
	now := s.now()
	s.preempted.expire(s.state, now)
	read := s.state.Index
	s.beginRead()
	s.mu.Unlock()
	held := time.Since(locked)
	r := s.readModel(now, &held)
	snap, groups := r.built.Snapshot, r.groups
	s.timing.lockHold, s.timing.read = held, time.Since(locked)
	// the stages collect found are copied for the API beside the step,
	// which does not read them; done before any action rewrites them
	published := make(chan struct{})
	go func() { defer close(published); s.publishStages() }()
	defer func() { <-published }()
	s.metrics.lockHold.Observe(s.timing.lockHold.Seconds())
	for _, pr := range r.built.Problems {
		s.log.Warn("model problem", "problem", pr)
	}
	oldest := 0.0
	for _, g := range groups {
		if !g.Submit.IsZero() {
			oldest = max(oldest, now.Sub(g.Submit).Seconds())
		}
	}
	s.metrics.oldestPending.Set(oldest)

	start := s.now()
	// the step's own changes to the snapshot are undone beside what is
	// done with its actions, which do not read it until releaseHolds
	actions, restore := decide.StepThenRestore(s.policy, decide.Input{Snapshot: snap, Groups: groups, Ends: r.ends, Now: now, Running: r.running, Stretched: r.stretched}, stepConfig(s.cfg))
	s.timing.step = time.Since(locked) - s.timing.lockHold
	restored := make(chan struct{})
	go func() { defer close(restored); restore() }()
	defer func() { <-restored }() // a pass that stops early: the next reads the snapshot
	s.metrics.stepSeconds.Observe(s.now().Sub(start).Seconds())
	<-published
	if s.onStep != nil {
		s.onStep(actions)
	}
	positions := map[decide.Key]queuePos{}
	for _, a := range actions {
		if a.Kind == decide.Wait && a.Of > 0 {
			positions[a.Group] = queuePos{Position: a.Position, Of: a.Of}
		}
	}
	failed := map[decide.Key]bool{} // groups whose preemption failed: no pin
	var pins []decide.Action
	kept := map[string]bool{} // shares of allocations a failed unpair left running
	for _, a := range actions {
		if ctx.Err() != nil {
			return
		}
		if a.Kind == decide.Pin || a.Kind == decide.Repin {
			pins = append(pins, a) // sent together once the preemptions are done
			continue
		}
		if err := s.execute(ctx, a, r.jobs[a.Group], r.shape, r.said[a.Group], r.pending, failed); err != nil && a.Kind == decide.Unpair {
			s.sharesOf(a.Allocs, kept)
		}
	}
	pins = append(pins, r.inPlace...)
	pending := r.pending
	notGiven(pins, kept, pending, failed)
	// holds done or stale go first: a new pin's hold may need their shares
	<-restored
	s.staging.releaseHolds(ctx, snap)
	s.stopOverlaps(ctx)
	s.sendPins(ctx, pins, r.jobs, pending, failed, start)
	if ctx.Err() != nil {
		return
	}
	s.resizeElastic(ctx, r, actions)
	s.readPriors(ctx)
	promoting := s.promoter().promote(ctx, r.promotions)
	s.mu.Lock()
	for k, why := range promoting { // said in the groups' lifecycle reason
		s.answers.sayStage(k, why)
	}
	s.answers.publish(pending, positions)
	s.answers.finished(read)
	waiting, refused := 0, 0
	for k := range pending {
		if _, ok := s.refusals.refusedForGood(k); ok {
			refused++
		} else {
			waiting++
		}
	}
	s.mu.Unlock()
	// every group the pass left waiting, whatever the reason, and every
	// group refused for good: what /v1/groups lists
	s.metrics.pending.Set(float64(waiting))
	s.metrics.refused.Set(float64(refused))
	s.publishFigures(pending) // per namespace and state (figures.go)
	s.records.saveState(ctx)
	s.timing.longestHold = s.mu.longest()
	s.metrics.longestHold.Set(s.timing.longestHold.Seconds())
}

// passRead is what a pass read of the model (readModel).
type passRead struct {
	built   *model.Built
	shape   uint64
	groups  []decide.Group
	jobs    map[decide.Key]*api.Job
	pending map[decide.Key]string
	inPlace []decide.Action
	// said is what Nomad said of the pins it could not place (collect)
	said    map[decide.Key]string
	ends    map[string]time.Time
	running map[string]decide.Running
	// stretched is what sharing has cost allocations so far (stretched)
	stretched map[string]float64
	// promotions are the deployments of the scheduler's own pins that
	// wait for a promote (promotable)
	promotions []promotion
	// elastic are the groups that opted in to elastic resizing
	// (readElastic)
	elastic []elasticGroup
}

// readModel is the pass's read of the model, begun by the caller
// (beginRead, under s.mu): the snapshot, the groups to decide, when
// allocations are expected to end and the pins Nomad placed (confirm),
// read without s.mu; then, under it again, what introspection keeps
// (running), and the read ends. held adds the time s.mu was held.
func (s *loop) readModel(now time.Time, held *time.Duration) (r passRead) {
	defer func() { // ended even if the read fails: the changes waiting are applied
		s.mu.Lock()
		relocked := time.Now()
		if r.built != nil {
			r.running = s.running(r.built.Snapshot, now)
			r.stretched = s.stretched()
		}
		s.endRead()
		*held += time.Since(relocked)
		s.mu.Unlock()
	}()
	r.built = s.state.Snapshot(s.profile, s.preempted.has)
	snap := r.built.Snapshot
	snap.SetStaging(s.staging.canStage)
	r.shape = s.shape.hashOf(snap)
	if r.shape != s.warnedShape {
		s.warnedShape = r.shape
		checkGuarantees(s.cfg, s.log, snap)
	}
	// confirm reads the model and writes only s.unconfirmed, which
	// collect does not read: the two run side by side, on the second
	// processor
	confirmed := make(chan struct{})
	go func() { defer close(confirmed); s.unconfirmed.confirm(s.state, s.now, s.log, s.metrics) }()
	defer func() { <-confirmed }() // before the read ends, also if collect fails
	out := s.collect(r.built, r.shape)
	r.groups, r.jobs, r.pending, r.inPlace, r.said = out.groups, out.jobs, out.pending, out.inPlace, out.said
	// what a hold takes, and where none of a group's may run
	s.staging.holdRules(snap, r.groups)
	// a group waiting for its holds keeps its decision and its shares
	var kept []decide.Action
	r.groups, kept = s.staging.keepStaged(r.built, r.jobs, r.groups)
	r.inPlace = append(r.inPlace, kept...)
	r.elastic = s.readElastic(r.built)
	// the running jobs' expected ends: reservations read them, and with
	// idle_gpu_first so does the rule that sharing must beat waiting, in
	// every pass, as the simulator's policy does
	if len(r.groups) > 0 && (s.cfg.IdleGPUFirst || s.cfg.ReservationsOn() && anyMultiGPU(snap, r.groups)) {
		r.ends = s.expectedEnds(snap, r.built.HeldFor, now)
	}
	<-confirmed
	if s.lease.mayWrite() == nil {
		r.promotions = promotable(s.state, s.collectCache().canaries)
	}
	if s.onRead != nil {
		s.onRead()
	}
	return r
}

// note runs fn, which changes what the HTTP API shows of the loop (why
// groups wait or were refused, why they are where they are), under s.mu:
// a pass reads the model without it (reading.go).
func (s *loop) note(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// stepConfig is the configuration cfg as decide.Step reads it.
func stepConfig(cfg *config.Config) decide.Config {
	return decide.Config{
		DefaultExpected: config.Duration(cfg.DefaultExpectedRuntime),
		Reservations:    cfg.ReservationsOn(),
		IdleFirst:       cfg.IdleGPUFirst,
		VCs:             cfg.VCNames(),
		MaxSlowdown:     cfg.ProductionMaxSlowdown,
		InPlacePins:     cfg.InPlacePinsOn(),
		MaxStretch:      cfg.MaxStretch(),
		ObserveWithin:   observeWithin(cfg),
	}
}

// observeWithin is how soon introspection judges a new pairing, which
// bounds what a wrong one costs (decide.Config.ObserveWithin): one window,
// under bounded_cost only (0: a pairing whose pessimistic outcome loses
// is not tried).
func observeWithin(cfg *config.Config) time.Duration {
	if !cfg.BoundedCost() {
		return 0
	}
	return cfg.IntrospectionWindow()
}

// execute carries out one action of the step but a pin (sendPins). It
// returns why a preemption or an unpairing failed: the allocations it was
// to stop still run. nomadSaid is what Nomad said of the group's pin it
// could not place, if it did.
func (s *loop) execute(ctx context.Context, a decide.Action, job *api.Job, shape uint64, nomadSaid string, pending map[decide.Key]string, failed map[decide.Key]bool) error {
	log := s.log.With("job_id", a.Group.Job, "namespace", a.Group.Namespace, "group", a.Group.Group)
	switch a.Kind {
	case decide.Wait:
		s.metrics.decisions.WithLabelValues("refused").Inc()
		pending[a.Group] = a.Reason
		if st, ok := s.answers.stage(a.Group); ok && st.Beside {
			pending[a.Group] = "its new version is deployed with canaries, which need room beside the running allocations (Nomad keeps those until the deployment is promoted); " + a.Reason
		}
		if nomadSaid != "" {
			pending[a.Group] = "its pinned version could not be placed (" + nomadSaid + "); " + a.Reason
		}
		log.Debug("group waits", "reason", a.Reason)
	case decide.Reserve:
		log.Debug("group holds nodes", "nodes", len(a.Hold), "reason", a.Reason)
	case decide.Refuse:
		s.metrics.decisions.WithLabelValues("never").Inc()
		pending[a.Group] = a.Reason
		s.mu.Lock()
		s.refusals.refuse(a.Group, newRefusal(job, a.Reason, shape, s.mirror.decidedOn(a.Group)))
		s.mu.Unlock()
		log.Warn("refused for good: no node of this cluster can ever hold the group; it is decided again when the job or the cluster's nodes change", "reason", a.Reason)
	case decide.Preempt:
		if err := s.preempt(ctx, a.Allocs, a.Group); err != nil {
			pending[a.Group] = s.refusals.failed(a.Group, "preemption", err, s.now())
			log.Warn("preemption failed; will retry", "error", err, "reason", pending[a.Group])
			failed[a.Group] = true
			return err
		}
	case decide.Unpair:
		if err := s.unpair(ctx, a, pending); err != nil {
			failed[a.Group] = true
			return err
		}
	}
	return nil
}

// sharesOf adds the shares of allocations to set. The caller does not
// hold s.mu.
func (s *loop) sharesOf(allocIDs []string, set map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range allocIDs {
		if a, ok := s.state.Allocs[id]; ok {
			for _, sh := range model.Shares(a) {
				set[sh] = true
			}
		}
	}
}

// notGiven fails the pins that were given shares of allocations still
// running (kept: a failed unpairing left them there): the step counted
// those shares free, Nomad does not.
func notGiven(pins []decide.Action, kept map[string]bool, pending map[decide.Key]string, failed map[decide.Key]bool) {
	if len(kept) == 0 {
		return
	}
	for _, a := range pins {
		if a.Decision == nil || failed[a.Group] {
			continue
		}
		for _, p := range a.Decision.Placements {
			if slices.ContainsFunc(p.Shares, func(sh string) bool { return kept[sh] }) {
				failed[a.Group] = true
				pending[a.Group] = "not pinned: it was given shares of an allocation that was to be unpaired, and stopping that allocation failed; decided again in the next pass"
				break
			}
		}
	}
}

// dropGone deletes from m, a map of the loop's or of a type it composes,
// the groups whose job the model (c) no longer has: found during the
// pass's read, deleted under c.mu (the HTTP API reads those maps). The
// caller does not hold c.mu.
func dropGone[V any](c *cluster, m map[decide.Key]V) {
	if gone := goneKeys(c.state, m); len(gone) > 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, k := range gone {
			delete(m, k)
		}
	}
}

// vcRefusal says why a group may not claim the virtual cluster it names
// in gpushare.vc ("" when it may, or names none): the VC must be one this
// scheduler has (in cfg), and admit the group's namespace.
func vcRefusal(cfg *config.Config, k decide.Key, name string) string {
	if name == "" {
		return ""
	}
	vc, ok := cfg.VC(name)
	if !ok {
		names := cfg.VCNames()
		if len(names) == 0 {
			names = []string{"none"}
		}
		return fmt.Sprintf("%s = %q names no virtual cluster of this scheduler (it has: %s): remove it, or ask the operator to add it", pin.MetaVC, name, strings.Join(names, ", "))
	}
	if !vc.Admits(k.Namespace) {
		return fmt.Sprintf("virtual cluster %q is bound to namespaces %s; a job of namespace %s cannot claim it: remove %s or run the job in one of those", name, strings.Join(vc.Namespaces, ", "), k.Namespace, pin.MetaVC)
	}
	return ""
}

// anyMultiGPU reports whether a group asks for two GPUs or more per
// allocation on some node, the only kind a reservation is made for.
func anyMultiGPU(snap *placement.Snapshot, groups []decide.Group) bool {
	least := 0
	for _, n := range snap.Nodes() {
		for i := range n.GPUs {
			if spg := n.GPUs[i].Shares; least == 0 || spg < least {
				least = spg
			}
		}
	}
	for _, g := range groups {
		if least > 0 && g.Req.Shares >= 2*least {
			return true
		}
	}
	return false
}

// checkGuarantees warns on log when the virtual clusters of cfg guarantee
// more GPUs than the cluster has (a guarantee it cannot keep).
func checkGuarantees(cfg *config.Config, log hclog.Logger, snap *placement.Snapshot) {
	have := 0.0
	for _, n := range snap.Nodes() {
		for i := range n.GPUs {
			g := &n.GPUs[i]
			have += float64(g.Cap) / float64(g.Shares) // a MIG instance: its part of its parent
		}
	}
	promised := 0
	for _, vc := range cfg.VCs {
		for _, c := range vc.Cells {
			promised += c.GPUs * c.Count
		}
	}
	if float64(promised) > have+1e-9 {
		log.Warn("the virtual clusters guarantee more GPUs than the cluster has: guaranteed jobs may wait, and opportunistic ones be preempted, for capacity that does not exist",
			"guaranteed_gpus", promised, "cluster_gpus", have)
	}
}

// hashOf is clusterShape, hashed again only when the snapshot's nodes
// changed (placement.Snapshot.Epoch): every GPU of the cluster is hashed.
// The caller is the loop's goroutine.
func (m *shapeMemo) hashOf(snap *placement.Snapshot) uint64 {
	if !m.of.is(snap) {
		*m = shapeMemo{of: epochOf(snap), hash: clusterShape(snap)}
	}
	return m.hash
}

// shapeMemo is the clusterShape of a snapshot at an epoch.
type shapeMemo struct {
	of   snapEpoch
	hash uint64
}

// snapEpoch names a snapshot's nodes as they were at one epoch
// (placement.Snapshot.Epoch), for what is kept while they are the same.
// It does not keep the snapshot alive (a model rebuilt drops its last
// one), and a new snapshot is never taken for it, even at the same
// address.
type snapEpoch struct {
	snap  weak.Pointer[placement.Snapshot]
	epoch uint64
}

func epochOf(snap *placement.Snapshot) snapEpoch {
	return snapEpoch{snap: weak.Make(snap), epoch: snap.Epoch()}
}

// is reports whether snap's nodes are still those e named.
func (e snapEpoch) is(snap *placement.Snapshot) bool {
	return e.snap == weak.Make(snap) && e.epoch == snap.Epoch()
}

// clusterShape hashes what decides whether a group could ever fit: the
// usable nodes, their capacity and their GPUs (not their health or use).
func clusterShape(snap *placement.Snapshot) uint64 {
	// the bytes fmt's "%s|%d|%d|" and "%s/%s/%d," would write, appended
	// by hand: a pass hashes every GPU of the cluster under the lock
	h := fnv.New64a()
	var buf []byte
	for _, n := range snap.Nodes() {
		buf = append(buf[:0], n.ID...)
		buf = append(strconv.AppendInt(append(buf, '|'), int64(n.Capacity.CPU), 10), '|')
		buf = append(strconv.AppendInt(buf, int64(n.Capacity.MemoryMiB), 10), '|')
		for i := range n.GPUs {
			g := &n.GPUs[i]
			buf = append(append(append(append(buf, g.UUID...), '/'), g.Model...), '/')
			buf = append(strconv.AppendInt(buf, int64(g.Shares), 10), ',')
		}
		h.Write(buf)
	}
	return h.Sum64()
}

// expectedEnds returns when each allocation of the snapshot whose group
// declares its run time is expected to end: now plus what queue.Left
// expects of it from the time it ran since its tasks started (its
// creation, before), what sharing has cost it (introspection's charge)
// and its throughput when last judged, or now plus the run time for the
// holds of pinned groups not yet allocated. Allocations of groups that
// declare none are left out: the step expects them to run
// default_expected_runtime from now, and does not hold nodes or weigh
// sharing against waiting on such guesses. The caller holds s.mu.
func (s *loop) expectedEnds(snap *placement.Snapshot, holds map[string]decide.Key, now time.Time) map[string]time.Time {
	runFor := s.declaredRuntimes()
	progress := s.intro.progress()
	ends := map[string]time.Time{}
	for _, a := range snap.Allocs() {
		if k, ok := holds[a.ID]; ok {
			if d := runFor(k); d > 0 {
				ends[a.ID] = now.Add(d)
			}
			continue
		}
		al, ok := s.state.Allocs[a.ID]
		if !ok {
			continue
		}
		started := startedAt(al)
		if started.UnixNano() <= 0 {
			continue // neither started nor created, as far as is known
		}
		if d := runFor(model.AllocKey(al)); d > 0 {
			lost, rate := s.soFar(snap, a, progress)
			ends[a.ID] = now.Add(queue.Left(d, now.Sub(started), lost, rate))
		}
	}
	return ends
}

// soFar is what allocation a has lost of the time it ran and its speed
// now, a share of its speed alone, for queue.Left. A time-sliced one lost
// the time its launches waited for their turn, as its device plugin last
// reported it, and runs one turn in as many as its GPU's rotation holds
// (a GPU that holds a time-sliced allocation holds no other kind); any
// other lost what introspection charged to sharing and runs at its
// throughput as last judged (progress; 0: alone).
func (s *loop) soFar(snap *placement.Snapshot, a placement.Alloc, progress map[string]lostTally) (time.Duration, float64) {
	if !a.Timeslice {
		p := progress[a.ID]
		return p.lost, p.norm
	}
	var lost time.Duration
	gpu, _, _ := snap.SoleGPU(a.ID)
	if ts, ok := s.history.TimesliceOf(a.ID); ok {
		lost = ts.Suspended
		if ts.GPU != "" {
			gpu = ts.GPU // of several GPUs, the one it waited most on
		}
	}
	if n := len(snap.OnGPU(gpu)); n > 1 {
		return lost, 1 / float64(n)
	}
	return lost, 1
}

// declaredRuntimes returns each group's declared run time (0: none),
// read once per group. The caller holds s.mu.
func (s *loop) declaredRuntimes() func(decide.Key) time.Duration {
	expected := map[decide.Key]time.Duration{}
	return func(k decide.Key) time.Duration {
		if d, ok := expected[k]; ok {
			return d
		}
		var d time.Duration
		if job := s.state.Jobs[model.JobKey(k.Namespace, k.Job)]; job != nil {
			if r, err := s.state.Request(job, k.Group, s.profile); err == nil && r.Expected > 0 {
				d = r.Expected
			}
		}
		expected[k] = d
		return d
	}
}

// stretched is decide.Input.Stretched: charged, when max_stretch is on.
// The caller holds s.mu.
func (s *loop) stretched() map[string]float64 {
	if s.cfg.MaxStretch() <= 0 {
		return nil
	}
	return s.charged()
}

// charged is, by allocation of a group that declares its run time, the
// share of it that sharing has cost the allocation so far, as
// introspection observed it: what max_stretch bounds and what queue.Left
// nets from the time it ran (expectedEnds), and so what the leader saves
// for the next (records.charged). The caller holds s.mu.
func (s *loop) charged() map[string]float64 {
	runFor := s.declaredRuntimes()
	out := map[string]float64{}
	for id, lost := range s.intro.lostToSharing() {
		a, ok := s.state.Allocs[id]
		if !ok {
			continue
		}
		if d := runFor(model.AllocKey(a)); d > 0 {
			out[id] = lost.Seconds() / d.Seconds()
		}
	}
	return out
}

func nsOf(job *api.Job) string {
	if job.Namespace == nil {
		return ""
	}
	return *job.Namespace
}
