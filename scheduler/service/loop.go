package service

import (
	"context"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/gpuhistory"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// loop is the decision loop: each pass (reconcile.go) reads the model,
// asks lifecycle.Reconcile where each group stands and decide.Step what
// to do, and acts on Nomad (pins.go, moves.go, introspect.go). It also
// learns profiles (observe.go) and keeps for the API what its view
// shows (apiView, view.go).
// Its fields but dirty are guarded by the model's lock (cluster.mu); the
// types it composes for a concern (refusals, answers, staging,
// introspection, preemptions) own their per-group maps and say in their
// comment which lock guards each. What it keeps per group beyond what
// lifecycle.Reconcile reads and returns is listed, with why, in doc.go.
type loop struct {
	*cluster
	cfg     *config.Config
	log     hclog.Logger
	nomad   nomadActions
	records recordKeeper
	lease   leadership
	policy  placement.Policy
	profile *interference.Model
	metrics *metrics
	now     func() time.Time

	// unconfirmed are the pins sent whose allocations Nomad has not
	// made yet (confirm.go)
	unconfirmed unconfirmed
	// answers are the last pass's answers per group for the API: why
	// groups wait and their places in the queue, why pinned ones are
	// where they are, their stages (answers.go)
	answers answers
	// priors: allocations whose version's pin was asked for or read
	// (prior.go)
	priors priors
	// refusals are the groups refused for good, the nodes Nomad refused
	// groups' pins on, and the failed pins until their retry
	// (refusals.go, retry.go)
	refusals refusals
	// staging registers, keeps and lets go the holds of staged pins, and
	// owns what is known of them beyond their jobs (stager.go)
	staging *stager
	// warnedShape is the cluster shape checkGuarantees last looked at;
	// shape the last one hashed (shapeMemo.hashOf).
	warnedShape uint64
	shape       shapeMemo
	// pinDelay waits between a decision and its pin (SetPinDelay).
	pinDelay time.Duration
	// timing is how long the last pass held mu and took (metrics, bench)
	timing passTiming
	// onStep, when set (tests), sees the actions of every step; onRead
	// runs during every pass's read of the model, without s.mu.
	onStep func([]decide.Action)
	onRead func()
	// preempted are the allocations Nomad is stopping, whose capacity is
	// already given away, and preemptions the groups last preempted
	// (preemptions.go)
	preempted   stopping
	preemptions preemptionLog
	// intro watches allocations that share a GPU (introspect.go)
	intro *introspection
	// mirror is which nodes each group's own rules allow, as Nomad
	// checks them (feasible.go); moves where groups run and whether they
	// stay (moves.go)
	mirror *ruleMirror
	moves  moves
	// collected is what collect found for each job (collect_cache.go).
	collected *collectCache
	// gate stops allocations by gating their groups again (preemptions.go)
	gate *gater
	// pins writes the pins a pass sends into their jobs and registers
	// them (pins.go); its runtimes read what a pin writes besides the
	// pins (runtime.go)
	pins *pinner

	// history is what the GPUs and the jobs did (gpustats.go).
	history *gpuhistory.Store
	// elastic grows and shrinks the groups that opted in (elastic.go).
	elastic *elastic

	// dirty asks for a pass (markDirty).
	dirty chan struct{}
}

// nomadActions is the part of Nomad the loop acts on and reads beyond the
// model.
type nomadActions interface {
	Job(ctx context.Context, namespace, id string) (*api.Job, error)
	// Register re-registers job if its modify index is still index, and
	// returns the new version's modify index (0 when Nomad did not say).
	Register(ctx context.Context, job *api.Job, index uint64) (uint64, error)
	StopAlloc(ctx context.Context, id string) error
	Alloc(ctx context.Context, id string) (*api.Allocation, error)
	DeviceStats(ctx context.Context, nodeID string) ([]*api.DeviceGroupStats, error)
	// LatestDeployment is the job's latest deployment (nil: none), and
	// PromoteAll promotes every canary group of a deployment (promote.go).
	LatestDeployment(ctx context.Context, namespace, jobID string) (*api.Deployment, error)
	PromoteAll(ctx context.Context, namespace, deploymentID string) error
}

// recordKeeper is what the loop asks of the records (state.go, submit.go).
type recordKeeper interface {
	// sign signs a placement, once the key is loaded. The caller holds mu.
	sign(k decide.Key, placement string) (string, bool)
	// submitOf, keepSubmit and keepSubmitOfPin keep a job's place in the
	// queue across the scheduler's registrations. The caller holds mu.
	submitOf(job *api.Job) int64
	keepSubmit(job *api.Job, from, to uint64)
	keepSubmitOfPin(job *api.Job, from, to uint64)
	// saveState writes what changed. The caller does not hold mu.
	saveState(ctx context.Context)
}

// leadership is this replica's lease (leader.go).
type leadership interface {
	// mayWrite is ErrNotLeader unless this replica may change jobs now.
	mayWrite() error
	isLeader() bool
	// follows reports whether this replica campaigns and does not lead:
	// the leader samples and learns, not it.
	follows() bool
}

var (
	_ notes        = loopNotes{}
	_ nomadActions = nomadClient{}
)

func newLoop(c *cluster, cfg *config.Config, log hclog.Logger, n nomadActions, policy placement.Policy, prof *interference.Model,
	m *metrics, now func() time.Time, intro *introspection) *loop {
	s := &loop{
		cluster: c, cfg: cfg, log: log, nomad: n, policy: policy, profile: prof, metrics: m, now: now,
		answers:   newAnswers(&c.mu),
		refusals:  newRefusals(&c.mu),
		preempted: stopping{},
		dirty:     make(chan struct{}, 1), intro: intro,
		mirror:  newRuleMirror(c),
		history: gpuhistory.New(gpuhistory.Span, config.Duration(cfg.ObserveInterval)),
	}
	s.moves = moves{state: c.state, rules: s.mirror, policy: policy.Name()}
	return s
}

// run decides a pass whenever the model changed, and every 2s, until ctx
// ends.
func (s *loop) run(ctx context.Context) {
	s.markDirty()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		case <-tick.C:
		}
		s.reconcile(ctx)
	}
}

// markDirty asks for a pass.
func (s *loop) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// passTiming is how long the last pass held mu (lockHold), took to read
// the model (read, mu held or not) and then to decide before any pin
// beyond the time mu was held (step); longestHold is the longest anyone
// held mu at once from the end of the pass before to the end of the last
// (timedMutex).
type passTiming struct {
	lockHold, read, step, longestHold time.Duration
}

// loopNotes are the notes the records save and read (records' notes) of
// what the loop's parts keep: the answers, the refusals, the allocations
// being stopped for a preemption, the observations and the priors. The
// caller holds the model's lock.
type loopNotes struct {
	answers      *answers
	refusals     *refusals
	preempted    *stopping
	observations observations
	priors       *priors
}

// notesOf are the notes of loop s's parts and of the samples obs.
func notesOf(s *loop, obs observations) loopNotes {
	return loopNotes{answers: &s.answers, refusals: &s.refusals, preempted: &s.preempted, observations: obs, priors: &s.priors}
}

func (n loopNotes) reasons() (pending map[decide.Key]string, refused map[decide.Key]bool, placed map[decide.Key]string) {
	pending, placed = n.answers.notes()
	return pending, n.refusals.refusedGroups(), placed
}

func (n loopNotes) readReasons(pending, placed map[decide.Key]string, refused map[decide.Key]bool) {
	n.answers.readNotes(pending, placed)
	n.refusals.readFrom(pending, refused)
}

func (n loopNotes) preemptedAllocs() map[string]time.Time { return *n.preempted }

// readPreempted takes the leader's preemptions; those this replica made
// keep their own time.
func (n loopNotes) readPreempted(read map[string]time.Time) { *n.preempted = n.preempted.merge(read) }

func (n loopNotes) forgetGone(wanted map[string]bool) { n.observations.forget(wanted) }

func (n loopNotes) keyChanged() { n.priors.forget() }
