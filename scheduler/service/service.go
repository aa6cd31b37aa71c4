package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/feasible"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Service is one replica of the scheduling service.
type Service struct {
	cfg     *config.Config
	log     hclog.Logger
	nomad   nomadAPI
	policy  placement.Policy
	profile *interference.Model
	metrics *metrics
	now     func() time.Time

	*cluster
	watcher *watcher
	pending map[decide.Key]string    // why each group waits
	pinned  map[decide.Key]time.Time // when each group was pinned (unconfirmed)
	refused map[decide.Key]refusal   // groups refused for good
	// why each pinned group was placed where it is: the placement core's
	// reason, kept out of the signed meta (it depends on the cluster's
	// state, and the meta must not change when the decision does not)
	why map[decide.Key]string
	// stages are where the last pass found each group in its job's life
	// (lifecycle.Reconcile), for the API and the restart counts: read
	// from Nomad every pass, never kept across passes
	stages map[decide.Key]lifecycle.Result
	// nomadSaid is, for the pass under way, what Nomad said of the pins it
	// could not place (collect fills it)
	nomadSaid map[decide.Key]string
	// nomadRefused are the nodes Nomad could not place each group's pins
	// on, while the group misses allocations: a pin that fails is decided
	// again without all of them, never back and forth between two
	nomadRefused map[decide.Key]map[string]bool
	// priorRead: allocations whose version's pin was asked for (false)
	// or read (true); see prior.go
	priorRead map[string]bool
	retries   map[decide.Key]retry // groups whose pin failed, until their retry
	// warnedShape is the cluster shape checkGuarantees last looked at.
	warnedShape uint64
	// records are the scheduler's records in Nomad Variables (state.go)
	records *records
	// pinDelay waits between a decision and its pin (SetPinDelay).
	pinDelay time.Duration
	// lastLockHold is how long the last pass held mu to read the model,
	// lastStep how long it then took to decide (before any pin).
	lastLockHold, lastStep time.Duration
	// api serves the HTTP API and the page (http.go)
	api *httpAPI
	// onStep, when set (tests), sees the actions of every step.
	onStep func([]decide.Action)
	// preempted allocations Nomad is stopping: their capacity is already
	// given to the guaranteed job that preempted them
	preempted map[string]time.Time
	// preemptions are the groups last preempted, newest last (kept in
	// memory only: a new leader starts with none)
	preemptions []Preemption
	// positions are the queue places the last pass gave the groups it
	// left waiting
	positions map[decide.Key]queuePos
	// observations of groups running alone, by group key
	observations map[string][]interference.Observation

	dirty  chan struct{}
	leader atomic.Bool
	// leaseEnd is when this replica's leader lease runs out (Unix ns; 0:
	// no lease); see leader.go.
	leaseEnd atomic.Int64
	// needLease is set once the service campaigns: from then on a pin
	// needs a current lease.
	needLease atomic.Bool
	// newLocker makes the leader lock (tests replace it).
	newLocker func() (locker, error)
	listener  net.Listener

	// intro watches allocations that share a GPU (introspect.go)
	intro *introspection
	// rules caches each group's own feasibility rules (feasible.go), and
	// feasibleOf the nodes they allowed when the group was last decided.
	rules      *feasible.Cache
	feasibleOf map[decide.Key]uint64
}

// New builds a service from a validated configuration.
func New(cfg *config.Config, logger hclog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	token, err := cfg.Token()
	if err != nil {
		return nil, err
	}
	acfg := api.DefaultConfig()
	acfg.Address = cfg.Nomad.Address
	acfg.SecretID = token
	acfg.Region = cfg.Nomad.Region
	if cfg.Nomad.Namespace != "" {
		acfg.Namespace = cfg.Nomad.Namespace // else $NOMAD_NAMESPACE, read by DefaultConfig
	}
	acfg.TLSConfig = &api.TLSConfig{CACert: cfg.Nomad.CACert, ClientCert: cfg.Nomad.ClientCert, ClientKey: cfg.Nomad.ClientKey,
		TLSServerName: cfg.Nomad.TLSServer, Insecure: cfg.Nomad.Insecure}
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	return newService(cfg, logger, nomadClient{c: client, timeout: config.Duration(cfg.Nomad.RequestTimeout)}, time.Now)
}

func newService(cfg *config.Config, logger hclog.Logger, n nomadAPI, now func() time.Time) (*Service, error) {
	prof := interference.Default()
	for _, p := range cfg.Profiles {
		prof.Profiles[normalize(p.Name)] = interference.Profile{Name: p.Name, SM: p.SMUtil, MemBW: p.MemBW}
	}
	intro := newIntrospection(cfg, prof)
	policy, err := placement.New(cfg.Policy, placement.Options{Seed: cfg.Seed, Model: prof, VCs: cfg.VirtualClusters(), Mix: cfg.Mix(),
		MaxSlowdown: cfg.ProductionMaxSlowdown, Predictor: intro.predictor(cfg.IntrospectionOn())})
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, log: logger.Named("scheduler"), nomad: n, policy: policy, profile: prof,
		metrics: newMetrics(), now: now, cluster: &cluster{state: model.New()},
		pending: map[decide.Key]string{}, pinned: map[decide.Key]time.Time{}, refused: map[decide.Key]refusal{}, why: map[decide.Key]string{}, nomadRefused: map[decide.Key]map[string]bool{}, retries: map[decide.Key]retry{},
		preempted:    map[string]time.Time{},
		observations: map[string][]interference.Observation{},
		dirty:        make(chan struct{}, 1),
		intro:        intro,
		rules:        feasible.NewCache(), feasibleOf: map[decide.Key]uint64{},
	}
	s.watcher = &watcher{cluster: s.cluster, log: s.log, nomad: n, metrics: s.metrics, ns: s.namespaces(),
		interval: config.Duration(cfg.ResyncInterval), changed: s.markDirty}
	s.metrics.reg.MustRegister(intro.unpairs)
	s.records = newRecords(s.cluster, s.log, n, s, s, intro, now, config.Duration(cfg.Nomad.RequestTimeout))
	s.api = &httpAPI{cfg: cfg, log: s.log, nomad: n, view: s, profile: prof, metrics: s.metrics.reg, now: now, ns: s.namespaces()}
	s.state.Trust = s.records.trusted
	s.state.Feasible = s.holdable
	// namespaces are walls: an allocation of another is a neighbour, and
	// a VC counts only the allocations of the namespaces it admits
	s.state.Managed = managedNamespaces(cfg.Nomad.Namespaces).has
	s.state.Admits = func(name, ns string) bool {
		vc, ok := cfg.VC(name)
		return ok && vc.Admits(ns)
	}
	return s, nil
}

// Listen binds the HTTP address; Run serves on it. Separate so callers
// learn a bad address before the service starts.
func (s *Service) Listen() (string, error) {
	l, err := net.Listen("tcp", s.cfg.HTTPAddress)
	if err != nil {
		return "", fmt.Errorf("http_address %q: %w", s.cfg.HTTPAddress, err)
	}
	s.listener = l
	return l.Addr().String(), nil
}

// Run watches Nomad, serves HTTP and, while it holds the leader lock,
// places gated groups. It returns when ctx is cancelled.
func (s *Service) Run(ctx context.Context) error {
	if s.listener == nil {
		if _, err := s.Listen(); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	var wg sync.WaitGroup
	wg.Add(5)
	go func() {
		defer wg.Done()
		every(ctx, config.Duration(s.cfg.ObserveInterval), s.observe)
	}()
	go func() {
		defer wg.Done()
		if s.cfg.IntrospectionOn() {
			every(ctx, s.cfg.IntrospectionEvery(), s.introspectSample)
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		if s.cfg.HTTPCertFile != "" {
			err = srv.ServeTLS(s.listener, s.cfg.HTTPCertFile, s.cfg.HTTPKeyFile)
		} else {
			err = srv.Serve(s.listener)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "error", err)
		}
	}()
	go func() {
		defer wg.Done()
		s.watcher.watch(ctx)
	}()
	go func() {
		defer wg.Done()
		s.campaign(ctx)
	}()
	s.log.Info("scheduler started", "nomad", s.cfg.Nomad.Address, "http", s.listener.Addr().String(), "policy", s.cfg.Policy)
	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	wg.Wait()
	s.log.Info("scheduler stopped")
	return nil
}

// lead runs the decision loop while this replica holds the lock.
func (s *Service) lead(ctx context.Context) error {
	s.leader.Store(true)
	s.metrics.leader.Set(1)
	defer func() {
		s.leader.Store(false)
		s.metrics.leader.Set(0)
	}()
	s.log.Info("became leader: placing gated jobs")
	for {
		err := s.records.loadSecret(ctx, true)
		if err == nil {
			err = s.records.loadState(ctx, true)
		}
		if err == nil {
			break
		}
		s.log.Error("cannot read the scheduler's records from Nomad Variables; not deciding until they can be read (the token needs variables read/write on gpushare/*)", "error", err)
		sleep(ctx, 2*time.Second)
		if ctx.Err() != nil {
			return nil
		}
	}
	s.markDirty()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.log.Info("leadership ended")
			return nil
		case <-s.dirty:
		case <-tick.C:
		}
		s.reconcile(ctx)
	}
}

// Handler serves the HTTP API and the web page (http.go).
func (s *Service) Handler() http.Handler { return s.api.handler() }

// SetPinDelay makes the service wait d between a decision and its pin,
// for tests of a user's edit racing the pin; never set it in production.
func (s *Service) SetPinDelay(d time.Duration) { s.pinDelay = d }

// IsLeader reports whether this replica currently pins: it leads and its
// lease has not run out.
func (s *Service) IsLeader() bool { return s.leader.Load() && s.leaseCurrent() }

func (s *Service) markDirty() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func normalize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// groupKey is pin.GroupKey for a job in the state.
func groupKey(job *api.Job, group string) string { return pin.GroupKey(job, group) }
