package service

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// Elastic groups (Gandiva's grow-shrink, KAI's elastic workloads; the
// simulator's policy, scheduler/sim/gavel/elastic.go). A group that opts in
// with the meta gpushare.elastic = "true" and declares a scaling block
// (min, max) without a policy is grown by one allocation at a time into
// idle shares through Nomad's scale API, the path the Nomad Autoscaler
// takes, up to max, while no group that could use those shares waits;
// and shrunk back, newest allocations first (Nomad stops the
// highest-indexed ones when a count goes down), when a waiting group would
// fit on the shares its grown allocations hold, never below min nor below
// the count its user registered. A group whose scaling block has a policy is the Autoscaler's
// and never touched.
//
// What it needs beyond the pass's read is read back from Nomad, so that a
// restarted scheduler agrees: every resize is a scaling event whose
// message says why and whose meta carries the count the user registered
// (metaRegistered); the newest event of a group that set its count is
// where that count is read from, and when the group last resized.

// MetaElastic opts a group (or every group of a job) in: "true", "1" or
// "yes" (also "false", "0", "no").
const MetaElastic = "gpushare.elastic"

// The meta of the scaling events gpushare writes.
const (
	// metaResize is "grow" or "shrink".
	metaResize = "gpushare.resize"
	// metaRegistered is the count the group's user registered, before
	// gpushare grew it.
	metaRegistered = "gpushare.registered_count"
)

// DefaultElasticInterval is how often one group may resize by default.
const DefaultElasticInterval = time.Minute

// elasticNomad is what elastic groups need of Nomad beyond nomadActions.
type elasticNomad interface {
	// Scale sets a group's count through Nomad's scale API if the job's
	// modify index is still index, with a scaling event of message and
	// meta.
	Scale(ctx context.Context, namespace, jobID, group string, count int, index uint64, message string, meta map[string]any) error
	// ScaleEvents lists each group's scaling events, newest first.
	ScaleEvents(ctx context.Context, namespace, jobID string) (map[string][]*api.ScalingEvent, error)
}

// ElasticStatus is what /v1/jobs/<id> says of a group that opted in.
type ElasticStatus struct {
	// Managed: gpushare grows and shrinks it (else Why says why not).
	Managed bool `json:"managed"`
	Min     int  `json:"min,omitempty"`
	Max     int  `json:"max,omitempty"`
	// Registered is the count its user registered; Count what it asks
	// for now.
	Registered int `json:"registered,omitempty"`
	Count      int `json:"count,omitempty"`
	// Why says what the last pass found: why it was or was not resized.
	Why string `json:"why,omitempty"`
	// Last is the last resize gpushare made, as Nomad keeps it.
	Last *Resize `json:"last,omitempty"`
}

// Resize is one grow or shrink, read back from Nomad's scaling events.
type Resize struct {
	Direction string    `json:"direction"` // "grow" or "shrink"
	From      int       `json:"from"`
	To        int       `json:"to"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// elastic owns the state of elastic groups: what it read of their scaling
// events (by job and the job's modify index: a scale always makes a new
// version), when it last tried each, and what the last pass said. The loop
// calls it once a pass (resize) with what the pass read.
type elastic struct {
	log      hclog.Logger
	nomad    elasticNomad // nil: Nomad's scale API is not there, nothing resizes
	lease    leadership
	interval time.Duration
	resizes  *prometheus.CounterVec

	// events and sent are the pass goroutine's own.
	events map[string]scaleRead // by job key
	// sent is the last resize sent of each group: a job version is
	// resized once, and one Nomad refused is not tried again before the
	// interval.
	sent map[decide.Key]sentResize

	mu     sync.Mutex
	status map[decide.Key]ElasticStatus
}

// sentResize is a resize sent: for which job version, when, and why
// Nomad refused it ("" when it did not).
type sentResize struct {
	index   uint64
	at      time.Time
	refused string
}

// scaleRead is a job's scaling events as read at a job modify index.
type scaleRead struct {
	index  uint64
	groups map[string][]*api.ScalingEvent
	// err is why Nomad did not answer, at: when (read again after
	// the interval, or once the job changes)
	err error
	at  time.Time
}

func newElastic(log hclog.Logger, n any, lease leadership, interval time.Duration) *elastic {
	e := &elastic{log: log.Named("elastic"), lease: lease, interval: cmp.Or(interval, DefaultElasticInterval),
		resizes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpushare_elastic_resizes_total",
			Help: "Elastic groups (gpushare.elastic) grown or shrunk through Nomad's scale API, by direction (grow, shrink)."}, []string{"direction"}),
		events: map[string]scaleRead{}, sent: map[decide.Key]sentResize{}, status: map[decide.Key]ElasticStatus{}}
	e.nomad, _ = n.(elasticNomad)
	for _, d := range []string{"grow", "shrink"} {
		e.resizes.WithLabelValues(d)
	}
	return e
}

// statusOf is what the last pass said of group k (nil: it did not opt in).
func (e *elastic) statusOf(k decide.Key) *ElasticStatus {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.status[k]
	if !ok {
		return nil
	}
	return &st
}

// idle reports whether no group opted in as of the last pass.
func (e *elastic) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.status) == 0
}

// optIn reads gpushare.elastic: on, and whether the value is one it knows.
func optIn(v string) (on, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1", "yes":
		return true, true
	case "", "false", "0", "no":
		return false, true
	}
	return false, false
}

// elasticGroup is what a pass read of one group that opted in
// (readElastic).
type elasticGroup struct {
	key      decide.Key
	jobIndex uint64
	count    int
	// unmanaged says why gpushare does not resize it ("" when it does);
	// min and max are its scaling block's.
	unmanaged string
	min, max  int
	// running: every allocation of its count runs (lifecycle Running);
	// unplaced: it misses allocations Nomad has not placed.
	running, unplaced bool
	// allocs are its live allocations, lowest index first.
	allocs []indexedAlloc
	// req is its request for its count, on the nodes its rules allow
	// (reqErr: why there is none).
	req    placement.Request
	reqErr string
}

// indexedAlloc is a live allocation with its index in the group (the
// N of "job.group[N]"; Nomad stops the highest first when the count goes
// down).
type indexedAlloc struct {
	id, node string
	index    int
	create   uint64
	shares   []string
}

// allocIndex reads N from an allocation name "job.group[N]" (-1: none).
func allocIndex(name string) int {
	if n, ok := model.NameIndex(name); ok {
		return n
	}
	return -1
}

// resizePass is what resize decides on: the pass's snapshot (left as
// found), the policy, the groups read, and what the step did.
type resizePass struct {
	now    time.Time
	snap   *placement.Snapshot
	pol    placement.Policy
	groups []elasticGroup
	// waits are the groups the step left waiting for room, in queue
	// order, with their reasons; placing: it placed or moved something,
	// which the snapshot does not show yet.
	waits   []decide.Group
	reasons map[decide.Key]string
	placing bool
}

// resizeTo is one resize to send.
type resizeTo struct {
	g        *elasticGroup
	to, base int
	reason   string
}

// managed is an elastic group gpushare resizes, with what Nomad's scaling
// events say of it.
type managed struct {
	*elasticGroup
	base int     // the count its user registered
	last *Resize // gpushare's last resize of it
	at   time.Time
}

// floor is how far it may shrink.
func (m *managed) floor() int { return max(m.min, m.base) }

// resize looks at every elastic group once: it reads their scaling events
// from Nomad (once per job version), shrinks the groups whose grown
// allocations hold shares a waiting group needs, shrinks back a growth
// Nomad did not place, else grows one group into idle shares; and says
// why in each group's status.
func (e *elastic) resize(ctx context.Context, p resizePass) {
	status := map[decide.Key]ElasticStatus{}
	var ms []*managed
	seen := map[string]bool{}
	for i := range p.groups {
		g := &p.groups[i]
		st := ElasticStatus{Min: g.min, Max: g.max, Count: g.count}
		if g.unmanaged != "" {
			st.Why = g.unmanaged
			status[g.key] = st
			continue
		}
		if e.nomad == nil {
			st.Why = "this scheduler cannot reach Nomad's scale API"
			status[g.key] = st
			continue
		}
		jk := g.key.Namespace + "/" + g.key.Job
		seen[jk] = true
		m, err := e.read(ctx, g, jk, p.now)
		if err != nil {
			st.Why = fmt.Sprintf("cannot read its scaling events from Nomad (%v); not resized until they can be read", err)
			status[g.key] = st
			continue
		}
		st.Managed, st.Registered, st.Last = true, m.base, m.last
		status[g.key] = st
		ms = append(ms, m)
	}
	for k := range e.events {
		if !seen[k] {
			delete(e.events, k)
		}
	}
	for k := range e.sent {
		if _, ok := status[k]; !ok {
			delete(e.sent, k)
		}
	}
	why := map[decide.Key]string{}
	todo := e.shrinkForWaiting(p, ms)
	todo = append(todo, e.shrinkBack(p, ms, todo)...)
	todo = append(todo, e.growOne(p, ms, len(todo) == 0, why)...)
	for _, r := range todo {
		w, done := e.send(ctx, p.now, r)
		why[r.g.key] = w
		if done {
			st := status[r.g.key]
			st.Last = &Resize{Direction: r.direction(), From: r.g.count, To: r.to, Reason: r.reason, At: p.now}
			status[r.g.key] = st
		}
	}
	for k, w := range why {
		st := status[k]
		st.Why = w
		status[k] = st
	}
	e.mu.Lock()
	e.status = status
	e.mu.Unlock()
}

// read resolves what Nomad's scaling events say of g: the count its user
// registered and gpushare's last resize.
func (e *elastic) read(ctx context.Context, g *elasticGroup, jk string, now time.Time) (*managed, error) {
	r, ok := e.events[jk]
	if !ok || r.index != g.jobIndex || r.err != nil && !now.Before(r.at.Add(e.interval)) {
		groups, err := e.nomad.ScaleEvents(ctx, g.key.Namespace, g.key.Job)
		r = scaleRead{index: g.jobIndex, groups: groups, err: err, at: now}
		e.events[jk] = r
	}
	if r.err != nil {
		return nil, r.err
	}
	m := &managed{elasticGroup: g, base: g.count}
	counted := false
	for _, ev := range r.groups[g.key.Group] {
		dir, ours := ev.Meta[metaResize].(string)
		if ev.Count == nil || ev.Error {
			continue
		}
		if !counted {
			// the newest event that set the count: when it is gpushare's
			// and the count is still its, the user registered the count
			// it carries; else the count is the user's (a registration
			// or `nomad job scale` since)
			counted = true
			if reg, ok := metaInt(ev.Meta[metaRegistered]); ours && ok && int(*ev.Count) == g.count {
				m.base = reg
			}
		}
		if ours && m.last == nil {
			at := time.Unix(0, int64(ev.Time))
			m.last = &Resize{Direction: dir, From: int(ev.PreviousCount), To: int(*ev.Count), Reason: ev.Message, At: at}
			m.at = at
		}
		if counted && m.last != nil {
			break
		}
	}
	if s, ok := e.sent[g.key]; ok && s.at.After(m.at) {
		m.at = s.at
	}
	return m, nil
}

// metaInt reads an integer from a scaling event's meta (JSON: a string or
// a number).
func metaInt(v any) (int, bool) {
	switch x := v.(type) {
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	case float64:
		return int(x), x == float64(int(x))
	case int:
		return x, true
	}
	return 0, false
}

// direction is "grow" or "shrink".
func (r resizeTo) direction() string {
	if r.to < r.g.count {
		return "shrink"
	}
	return "grow"
}

// send scales the group through Nomad (the leader only): it returns what
// to say of it, and whether Nomad took it.
func (e *elastic) send(ctx context.Context, now time.Time, r resizeTo) (string, bool) {
	m, dir := r.g, r.direction()
	log := e.log.With("job_id", m.key.Job, "namespace", m.key.Namespace, "group", m.key.Group, "from", m.count, "to", r.to)
	if err := e.lease.mayWrite(); err != nil {
		return "would " + dir + " (" + r.reason + "), but this replica does not lead", false
	}
	meta := map[string]any{metaResize: dir, metaRegistered: strconv.Itoa(r.base)}
	if err := e.nomad.Scale(ctx, m.key.Namespace, m.key.Job, m.key.Group, r.to, m.jobIndex, "gpushare: "+r.reason, meta); err != nil {
		log.Warn("elastic resize failed; tried again after the interval", "error", err)
		why := fmt.Sprintf("tried to %s (%s); Nomad refused: %v; tried again after %s (elastic_interval)", dir, r.reason, err, e.interval)
		e.sent[m.key] = sentResize{index: m.jobIndex, at: now, refused: why}
		return why, false
	}
	e.sent[m.key] = sentResize{index: m.jobIndex, at: now}
	e.resizes.WithLabelValues(dir).Inc()
	log.Info("elastic group resized", "reason", r.reason)
	return r.reason, true
}
