package gpuhistory

import (
	"sync"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpumap"
)

// Span is how far back the history goes.
const Span = time.Hour

// MaxPoints bounds each series, whatever the interval.
const MaxPoints = 720

// JobKey names a job.
type JobKey struct{ Namespace, Job string }

// Store is the GPUs' latest stats and the history of their and the jobs'
// utilisation. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	span     time.Duration
	interval time.Duration
	size     int
	gpus     map[string]*gpuSeries
	jobs     map[JobKey]*ring
	// timeslices are the time-sliced allocations' latest figures, by
	// allocation ID (timeslice.go)
	timeslices []AllocTimeslice
}

type gpuSeries struct {
	latest gpumap.Stats
	util   *ring
}

// New keeps span of history sampled every interval: span/interval+1
// points per series, at most MaxPoints.
func New(span, interval time.Duration) *Store {
	size := MaxPoints
	if interval > 0 {
		size = min(int(span/interval)+1, MaxPoints)
	}
	return &Store{span: span, interval: interval, size: size, gpus: map[string]*gpuSeries{}, jobs: map[JobKey]*ring{}}
}

// Span is how far back the store remembers; Interval how often it is fed.
func (s *Store) Span() time.Duration     { return s.span }
func (s *Store) Interval() time.Duration { return s.interval }

// Size is the most points a series holds.
func (s *Store) Size() int { return s.size }

// Record adds a round of samples taken at: the stats of each GPU read (by
// UUID) and the utilisation of each job (percent of one GPU, summed over
// its GPUs). GPUs and jobs without a point within the span are forgotten.
func (s *Store) Record(at time.Time, gpus map[string]gpumap.Stats, jobs map[JobKey]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uuid, st := range gpus {
		g := s.gpus[uuid]
		if g == nil {
			g = &gpuSeries{util: newRing(s.size)}
			s.gpus[uuid] = g
		}
		st.At = at
		g.latest = st
		g.util.add(Point{At: at, Value: st.UtilizationPct})
	}
	for k, v := range jobs {
		r := s.jobs[k]
		if r == nil {
			r = newRing(s.size)
			s.jobs[k] = r
		}
		r.add(Point{At: at, Value: v})
	}
	from := at.Add(-s.span)
	for uuid, g := range s.gpus {
		if p, ok := g.util.last(); !ok || p.At.Before(from) {
			delete(s.gpus, uuid)
		}
	}
	for k, r := range s.jobs {
		if p, ok := r.last(); !ok || p.At.Before(from) {
			delete(s.jobs, k)
		}
	}
}

// Latest is a GPU's latest stats.
func (s *Store) Latest(uuid string) (gpumap.Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gpus[uuid]
	if g == nil {
		return gpumap.Stats{}, false
	}
	return g.latest, true
}

// GPU is a GPU's utilisation over the span before now, oldest first.
func (s *Store) GPU(uuid string, now time.Time) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gpus[uuid]; g != nil {
		return g.util.since(now.Add(-s.span))
	}
	return nil
}

// Job is a job's utilisation over the span before now, oldest first.
func (s *Store) Job(k JobKey, now time.Time) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.jobs[k]; r != nil {
		return r.since(now.Add(-s.span))
	}
	return nil
}

// GPUs and Jobs list what the store has a history of.
func (s *Store) GPUs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.gpus))
	for u := range s.gpus {
		out = append(out, u)
	}
	return out
}

func (s *Store) Jobs() []JobKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobKey, 0, len(s.jobs))
	for k := range s.jobs {
		out = append(out, k)
	}
	return out
}
