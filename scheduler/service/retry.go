package service

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
)

// Failed pins and preemptions are retried with backoff, per group: 2 s,
// then twice as long each time, at most 5 minutes; a success forgets it.
// A conflict (the job changed meanwhile) is not a failure: the group is
// decided again at once on the new version.
const (
	firstRetry = 2 * time.Second
	lastRetry  = 5 * time.Minute
)

// retry is when a group whose pin failed is decided again, and why it
// waits until then.
type retry struct {
	at     time.Time
	delay  time.Duration
	reason string
}

// failed records a failed pin or preemption of group k and returns the
// reason to show. The caller does not hold s.mu.
func (s *loop) failed(k decide.Key, what string, err error) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.retries[k]
	r.delay = min(max(2*r.delay, firstRetry), lastRetry)
	r.at = s.now().Add(r.delay)
	why := err.Error()
	if isForbidden(err) {
		need := "register-job (or submit-job)"
		if what == "preemption" {
			need = "register-job and alloc-lifecycle"
		}
		why = fmt.Sprintf("permission denied: the scheduler's token needs %s in namespace %s (see deploy/nomad/gpushare-scheduler.policy.hcl): %v", need, k.Namespace, err)
	}
	r.reason = fmt.Sprintf("%s failed: %s; retrying in %s", what, why, r.delay)
	s.retries[k] = r
	return r.reason
}

// succeeded forgets a group's failures.
func (s *loop) succeeded(k decide.Key) {
	s.mu.Lock()
	delete(s.retries, k)
	s.mu.Unlock()
}

// waiting returns why group k is not decided before its retry time. The
// caller holds s.mu.
func (s *loop) backingOff(k decide.Key) (string, bool) {
	r, ok := s.retries[k]
	if !ok || !s.now().Before(r.at) {
		return "", false
	}
	return r.reason, true
}

// request bounds one Nomad request of a pass (nomad.request_timeout).
func (s *loop) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, config.Duration(s.cfg.Nomad.RequestTimeout))
}

// isForbidden recognises Nomad's refusal of a token that lacks a
// capability (403 Permission denied).
func isForbidden(err error) bool {
	return isStatus(err, http.StatusForbidden) || (err != nil && strings.Contains(err.Error(), "Permission denied"))
}
