package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Service is one replica of the scheduling service: a composition of the
// watcher, which keeps the model of the cluster (watch.go), the decision
// loop (loop.go), the records in Nomad Variables (state.go) and the HTTP
// API and page (http.go), each behind the small interfaces the others
// declare, run while this replica holds the leader lease (leader.go).
type Service struct {
	cfg     *config.Config
	log     hclog.Logger
	nomad   nomadAPI
	metrics *metrics

	// cluster is the model and the one lock (watch.go).
	*cluster
	watcher *watcher
	loop    *loop
	sampler *sampler
	view    *apiView
	records *records
	api     *httpAPI
	lease   *lease

	// newLocker makes the leader lock (tests replace it).
	newLocker func() (locker, error)
	listener  net.Listener
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
		MaxSlowdown: cfg.ProductionMaxSlowdown, Predictor: intro.predictor(cfg.IntrospectionOn()),
		TimesliceMaxPerGPU: cfg.TimesliceMaxPerGPU(), BoundOnPrediction: cfg.BoundedCost()})
	if err != nil {
		return nil, err
	}
	managed := managedNamespaces(cfg.Nomad.Namespaces)
	c := &cluster{state: model.New(), relistNow: make(chan struct{}, 1)}
	log := logger.Named("scheduler")
	s := &Service{cfg: cfg, log: log, nomad: n, metrics: newMetrics(), cluster: c, lease: &lease{}}
	s.loop = newLoop(c, cfg, log, n, policy, prof, s.metrics, now, intro)
	s.loop.lease = s.lease
	s.loop.elastic = newElastic(log, n, s.lease, config.Duration(cfg.ElasticInterval))
	s.metrics.reg.MustRegister(s.loop.elastic.resizes)
	s.view = newAPIView(s.loop, s.lease)
	s.metrics.addFigures(s.loop, s.lease.follows)
	s.sampler = &sampler{c: c, nomad: n, lease: s.lease, profile: prof, log: log, now: now, history: s.loop.history, observations: observations{},
		intro: intro, preempted: &s.loop.preempted}
	s.records = newRecords(c, log, n, s.lease, notesOf(s.loop, s.sampler.observations), intro, now, config.Duration(cfg.Nomad.RequestTimeout))
	s.loop.records = s.records
	s.records.charged = s.loop.charged
	s.loop.gate = &gater{c: c, nomad: n, records: s.records, lease: s.lease, stopped: &s.loop.preempted, managed: managed,
		now: now, timeout: config.Duration(cfg.Nomad.RequestTimeout)}
	s.loop.staging = newStager(stagerDeps{cluster: c, nomad: n, signer: s.records, lease: s.lease, notes: &s.loop.answers,
		profile: prof, log: log, now: now, timeout: config.Duration(cfg.Nomad.RequestTimeout), dirty: s.loop.markDirty})
	s.loop.pins = &pinner{c: c, nomad: n, records: s.records, staging: s.loop.staging, answers: &s.loop.answers, lease: s.lease,
		runtimes: &runtimes{c: c, cfg: cfg}, unconfirmed: &s.loop.unconfirmed, metrics: s.metrics, log: log, now: now,
		policy: policy.Name(), timeout: config.Duration(cfg.Nomad.RequestTimeout)}
	s.watcher = &watcher{cluster: c, log: log, nomad: n, metrics: s.metrics, ns: managed,
		interval: config.Duration(cfg.ResyncInterval), changed: s.loop.markDirty}
	s.api = &httpAPI{cfg: cfg, log: log, nomad: n, view: s.view, profile: prof, metrics: s.metrics.reg, now: now, ns: managed}
	s.metrics.reg.MustRegister(intro.unpairs)
	s.state.Trust = s.records.trusted
	// a finished run is learned as it would have run alone (model/runs.go)
	// (a time-sliced one less the turns it waited, as loop.soFar counts it)
	s.state.RunCost = func(id string) time.Duration {
		if ts, ok := s.loop.history.TimesliceOf(id); ok {
			return ts.Suspended
		}
		return intro.chargeOf(id)
	}
	c.verifyHold = s.records.ownHold
	s.state.Feasible = s.loop.mirror.holdable
	// namespaces are walls: an allocation of another is a neighbour, and
	// a VC counts only the allocations of the namespaces it admits
	s.state.Managed = managed.has
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
		every(ctx, config.Duration(s.cfg.ObserveInterval), func(ctx context.Context) {
			s.sampler.sampleGPUs(ctx)
			s.sampler.observe(ctx)
		})
	}()
	go func() {
		defer wg.Done()
		if s.cfg.IntrospectionOn() {
			every(ctx, s.cfg.IntrospectionEvery(), s.sampler.introspectSample)
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

// lead reads the records and runs the decision loop while this replica
// holds the lock.
func (s *Service) lead(ctx context.Context) error {
	s.lease.leading.Store(true)
	s.metrics.leader.Set(1)
	defer func() {
		s.lease.leading.Store(false)
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
	s.loop.run(ctx)
	// the queue's gauges are the leader's passes' figures: a replica that
	// no longer decides shows none rather than its last pass's for ever
	s.metrics.pending.Set(0)
	s.metrics.refused.Set(0)
	s.metrics.oldestPending.Set(0)
	s.log.Info("leadership ended")
	return nil
}

// Handler serves the HTTP API and the web page (http.go).
func (s *Service) Handler() http.Handler { return s.api.handler() }

// SetPinDelay makes the service wait d between a decision and its pin,
// for tests of a user's edit racing the pin; never set it in production.
func (s *Service) SetPinDelay(d time.Duration) { s.loop.pinDelay = d }

// IsLeader reports whether this replica currently pins: it leads and its
// lease has not run out.
func (s *Service) IsLeader() bool { return s.lease.isLeader() }

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
