package service

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// While a pass reads the model, it does not hold the lock: the HTTP API
// answers, and what the event stream brings meanwhile waits, in order,
// until the read ends; then it is in the model, and the next pass
// decides it.
func TestAPassReadsWithoutTheLock(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("quarter", 25))
	s := newTestService(t, f)
	late := gated("late", 25)
	f.put(late)
	reads := 0
	s.loop.onRead = func() {
		reads++
		must.True(t, s.mu.TryLock(), must.Sprint("the pass holds the lock while it reads the model"))
		s.mu.Unlock()
		rr := httptest.NewRecorder()
		s.Handler().ServeHTTP(rr, apiRequest("GET", "/v1/groups", nil))
		must.Eq(t, http.StatusOK, rr.Code)
		must.NoError(t, s.watcher.applyJob(jobEvent(t, late).Events[0], s.watcher.ns))
		s.mu.Lock()
		_, seen := s.state.Jobs["default/late"]
		s.mu.Unlock()
		must.False(t, seen, must.Sprint("an event changed the model the pass was reading"))
	}
	s.loop.reconcile(t.Context())
	must.Eq(t, 1, reads)
	must.SliceEmpty(t, pin.Gated(f.jobs["quarter"]))
	s.mu.Lock()
	_, seen := s.state.Jobs["default/late"]
	reading := s.reading
	s.mu.Unlock()
	must.True(t, seen, must.Sprint("the event that came during the read was lost"))
	must.False(t, reading)
	s.loop.onRead = nil
	s.loop.reconcile(t.Context())
	must.SliceEmpty(t, pin.Gated(f.jobs["late"]))
}

// Events, API requests and passes at once: every event is in the model
// at the end, in the order it came (the last version of each job wins),
// and every pass ended its read. Run with -race, it also shows that the
// pass's read and the API's share nothing written.
func TestPassesEventsAndTheAPIAtOnce(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	for i := range 4 {
		f.put(gated(fmt.Sprintf("j%d", i), 25))
	}
	s := newTestService(t, f)
	const events = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range events {
			job := gated(fmt.Sprintf("e%d", i%20), uint64(1+i%7))
			job.ModifyIndex, job.JobModifyIndex, job.CreateIndex = ptr(uint64(10000+i)), ptr(uint64(10000+i)), ptr(uint64(10000+i%20))
			job.Version = ptr(uint64(i / 20))
			must.NoError(t, s.watcher.applyJob(jobEvent(t, job).Events[0], s.watcher.ns))
		}
	})
	wg.Go(func() {
		for range 50 {
			for _, path := range []string{"/v1/groups", "/v1/gpus", "/v1/health", "/v1/jobs/j1"} {
				rr := httptest.NewRecorder()
				s.Handler().ServeHTTP(rr, apiRequest("GET", path, nil))
				must.Eq(t, http.StatusOK, rr.Code, must.Sprint(path))
			}
		}
	})
	for range 20 {
		s.loop.reconcile(t.Context())
	}
	wg.Wait()
	s.loop.reconcile(t.Context())
	s.mu.Lock()
	defer s.mu.Unlock()
	must.False(t, s.reading)
	must.SliceEmpty(t, s.deferred)
	for i := range 20 {
		job := s.state.Jobs[fmt.Sprintf("default/e%d", i)]
		must.NotNil(t, job)
		last := events - 20 + i
		must.Eq(t, uint64(10000+last), *job.JobModifyIndex, must.Sprintf("job e%d is not at its last event", i))
	}
}
