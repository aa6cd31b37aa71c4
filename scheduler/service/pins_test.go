package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// barrierNomad answers no registration until want of them are in flight
// at once. Pins sent one after the other never get there: the first
// registration gives up after barrierBound (a liveness bound only; pins
// sent together arrive whatever the machine's speed) and every
// registration after it fails at once.
type barrierNomad struct {
	*fakeNomad
	want int
	// fail refuses the registrations of these jobs (once all arrived).
	fail map[string]error
	// atBarrier runs once, when want registrations are in flight, before
	// any of them is answered.
	atBarrier func()

	mu       sync.Mutex
	inFlight int
	most     int
	arrived  chan struct{}
	opened   bool
	// broken: the barrier gave up waiting; no registration is answered.
	broken bool
}

const barrierBound = 2 * time.Minute

func newBarrierNomad(f *fakeNomad, want int) *barrierNomad {
	return &barrierNomad{fakeNomad: f, want: want, arrived: make(chan struct{})}
}

var errNotConcurrent = errors.New("registrations were not sent concurrently")

func (b *barrierNomad) Register(ctx context.Context, j *api.Job, index uint64) (uint64, error) {
	b.mu.Lock()
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	if b.inFlight == b.want && !b.opened {
		b.opened = true
		if b.atBarrier != nil {
			b.atBarrier()
		}
		close(b.arrived)
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
	}()
	select {
	case <-b.arrived:
	case <-time.After(barrierBound):
		b.mu.Lock()
		if !b.opened {
			b.opened, b.broken = true, true
			close(b.arrived)
		}
		b.mu.Unlock()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	if broken {
		return 0, errNotConcurrent
	}
	if err := b.fail[*j.ID]; err != nil {
		b.fakeNomad.mu.Lock()
		b.registers++
		b.fakeNomad.mu.Unlock()
		return 0, err
	}
	return b.fakeNomad.Register(ctx, j, index)
}

// barrierService is a service on one DGX-1 with n gated jobs of 10
// shares, job-00 to job-<n-1>, whose registrations wait for want of them.
func barrierService(t *testing.T, n, want int) (*Service, *barrierNomad) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	for i := range n {
		f.put(gated(fmt.Sprintf("job-%02d", i), 10))
	}
	b := newBarrierNomad(f, want)
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "10m" // the barrier's bound is the one that ends a wait
	s, err := newService(cfg, hclog.NewNullLogger(), b, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	return s, b
}

// The pins of one pass are sent together, up to pinsInFlight at once: a
// burst of jobs does not wait for Nomad's answers one after the other.
func TestPinsOfAPassAreSentConcurrently(t *testing.T) {
	n := pinsInFlight + 4
	s, b := barrierService(t, n, 8)
	listed := b.jobReads // the first listing read each job once
	s.loop.reconcile(t.Context())

	must.Between(t, 8, b.most, pinsInFlight)
	must.Eq(t, n, b.registers)
	pinned := map[string]string{} // share -> job
	for i := range n {
		id := fmt.Sprintf("job-%02d", i)
		job := b.jobs[id]
		must.SliceEmpty(t, pin.Gated(job), must.Sprintf("job %s pinned", id))
		rec, ok := pin.ParseRecord(job, "g")
		must.True(t, ok)
		for _, sh := range rec.Shares {
			other, twice := pinned[sh]
			must.False(t, twice, must.Sprintf("share %s pinned to %s and %s", sh, other, id))
			pinned[sh] = id
		}
		must.MapNotContainsKey(t, s.loop.answers.pending, key(id))
	}
	// the model holds the pinned versions without reading them back (one
	// read per pin, before it): the next pass pins nothing again
	must.Eq(t, n, b.jobReads-listed)
	s.loop.reconcile(t.Context())
	must.Eq(t, n, b.registers)
	must.Eq(t, n, b.jobReads-listed)
}

// A pin that fails among concurrent ones backs off its own group only;
// the others are pinned.
func TestFailedConcurrentPinBacksOffItsGroupOnly(t *testing.T) {
	n := 6
	s, b := barrierService(t, n, n)
	b.fail = map[string]error{"job-02": errors.New("Unexpected response code: 500 (raft is busy)")}
	s.loop.reconcile(t.Context())

	must.Eq(t, []string{"g"}, pin.Gated(b.jobs["job-02"]))
	must.StrContains(t, s.loop.answers.pending[key("job-02")], "retrying in 2s")
	must.MapLen(t, 1, s.loop.refusals.retries)
	must.MapContainsKey(t, s.loop.refusals.retries, key("job-02"))
	for i := range n {
		if id := fmt.Sprintf("job-%02d", i); id != "job-02" {
			must.SliceEmpty(t, pin.Gated(b.jobs[id]), must.Sprintf("job %s pinned", id))
			must.MapNotContainsKey(t, s.loop.answers.pending, key(id))
		}
	}
}

// A lease lost while the pins of a pass are in flight stops the pins not
// yet sent: no registration starts after the loss.
func TestLostLeaseStopsTheRemainingPins(t *testing.T) {
	n := pinsInFlight + 5
	s, b := barrierService(t, n, pinsInFlight)
	s.lease.need.Store(true)
	s.lease.end.Store(time.Now().Add(time.Minute).UnixNano())
	b.atBarrier = func() { s.lease.end.Store(0) } // lost before any in-flight pin is answered
	s.loop.reconcile(t.Context())

	must.Eq(t, pinsInFlight, b.registers, must.Sprint("only the pins in flight when the lease was lost were sent"))
	notSent := 0
	for i := range n {
		id := fmt.Sprintf("job-%02d", i)
		if len(pin.Gated(b.jobs[id])) == 0 {
			continue
		}
		notSent++
		must.StrContains(t, s.loop.answers.pending[key(id)], ErrNotLeader.Error())
	}
	must.Eq(t, n-pinsInFlight, notSent)
	must.MapEmpty(t, s.loop.refusals.retries, must.Sprint("a pin not sent is no failure to back off from"))
}

// The pins of two groups of one job in one pass go in one registration:
// both are pinned in the pass, without a conflict.
func TestTwoGroupsOfOneJobPinnedInOnePass(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	job := gated("two", 25)
	second := *job.TaskGroups[0]
	second.Name = ptr("h")
	job.TaskGroups = append(job.TaskGroups, &second)
	f.put(job)
	s := newTestService(t, f)
	s.loop.reconcile(t.Context())

	must.Eq(t, 1, f.registers)
	must.SliceEmpty(t, pin.Gated(f.jobs["two"]))
	g, ok := pin.ParseRecord(f.jobs["two"], "g")
	must.True(t, ok)
	h, ok := pin.ParseRecord(f.jobs["two"], "h")
	must.True(t, ok)
	for _, sh := range g.Shares {
		must.SliceNotContains(t, h.Shares, sh)
	}
	must.Eq(t, 0.0, counterValue(t, s, "gpushare_pin_conflicts_total"))
}

// One job with many gated groups does not hold up a pass: its groups are
// pinned in one registration, sent together with those of the other jobs,
// so a pass pinning 30 groups of one job and 10 other jobs waits for one
// round of answers (all 11 registrations in flight at once), not 30 one
// after the other, and every group is pinned on shares of its own.
func TestManyGroupsOfOneJobDoNotHoldUpAPass(t *testing.T) {
	const groups, others = 30, 10
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	many := gated("many", 10)
	first := many.TaskGroups[0]
	for i := 1; i < groups; i++ {
		tg := *first
		tg.Name = ptr(fmt.Sprintf("g%02d", i))
		many.TaskGroups = append(many.TaskGroups, &tg)
	}
	many.SubmitTime = ptr(int64(1)) // first in the queue
	f.put(many)
	for i := range others {
		f.put(gated(fmt.Sprintf("job-%02d", i), 10))
	}
	b := newBarrierNomad(f, 1+others)
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "10m" // the barrier's bound is the one that ends a wait
	s, err := newService(cfg, hclog.NewNullLogger(), b, func() time.Time { return time.Unix(1000, 0) })
	must.NoError(t, err)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	t.Logf("registrations: %d, at most %d in flight", f.registers, b.most)
	must.Eq(t, 1+others, b.most, must.Sprint("every registration of the pass in flight at once"))
	must.Eq(t, 1+others, f.registers)
	must.SliceEmpty(t, pin.Gated(f.jobs["many"]))
	taken := map[string]string{}
	for _, tg := range f.jobs["many"].TaskGroups {
		rec, ok := pin.ParseRecord(f.jobs["many"], *tg.Name)
		must.True(t, ok, must.Sprint(*tg.Name))
		for _, sh := range rec.Shares {
			must.MapNotContainsKey(t, taken, sh, must.Sprintf("%s and %s", taken[sh], *tg.Name))
			taken[sh] = *tg.Name
		}
	}
	for i := range others {
		must.SliceEmpty(t, pin.Gated(f.jobs[fmt.Sprintf("job-%02d", i)]))
	}
}

// A group whose pin cannot be written into its job is left out of the
// registration with its error; the job's other groups are pinned.
func TestOneUnwritablePinLeavesTheOthers(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	job := gated("two", 25)
	second := *job.TaskGroups[0]
	second.Name = ptr("h")
	job.TaskGroups = append(job.TaskGroups, &second)
	f.put(job)
	s := newTestService(t, f)
	pins := decidedPins(t, s)
	must.SliceLen(t, 2, pins)
	pins[1].Decision = &placement.Decision{} // placed nothing: cannot be written
	errs := s.loop.pins.pinJob(t.Context(), f.jobs["two"], pins)
	must.NoError(t, errs[pins[0].Group])
	must.ErrorContains(t, errs[pins[1].Group], "placed nothing")
	must.Eq(t, 1, f.registers)
	must.Eq(t, []string{pins[1].Group.Group}, pin.Gated(f.jobs["two"]))
}

// decidedPins runs a pass of s that sends nothing and returns the pins it
// decided.
func decidedPins(t *testing.T, s *Service) []decide.Action {
	t.Helper()
	var pins []decide.Action
	s.loop.onStep = func(acts []decide.Action) {
		for _, a := range acts {
			if a.Kind == decide.Pin {
				pins = append(pins, a)
			}
		}
	}
	ctx, cancel := context.WithCancel(t.Context()) // the pass sends nothing
	cancel()
	s.loop.reconcile(ctx)
	return pins
}
