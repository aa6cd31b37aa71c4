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

// failed records a failed pin, preemption or unpairing of group k at
// now and returns the reason to show. It takes the model's lock; the
// caller does not hold it.
func (f *refusals) failed(k decide.Key, what string, err error, now time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.retries[k]
	r.delay = min(max(2*r.delay, firstRetry), lastRetry)
	r.at = now.Add(r.delay)
	why := err.Error()
	if isForbidden(err) {
		need := "register-job (or submit-job)"
		if what == "preemption" {
			need = "register-job and alloc-lifecycle"
		}
		why = fmt.Sprintf("permission denied: the scheduler's token needs %s in namespace %s (see deploy/nomad/gpushare-scheduler.policy.hcl): %v", need, k.Namespace, err)
	}
	r.reason = fmt.Sprintf("%s failed: %s; retrying in %s", what, why, r.delay)
	f.retries[k] = r
	return r.reason
}

// succeeded forgets a group's failures. It takes the model's lock.
func (f *refusals) succeeded(k decide.Key) {
	f.mu.Lock()
	delete(f.retries, k)
	f.mu.Unlock()
}

// backingOff returns why group k is not decided before its retry time,
// at now. The caller holds the model's lock or is the loop's goroutine.
func (f *refusals) backingOff(k decide.Key, now time.Time) (string, bool) {
	r, ok := f.retries[k]
	if !ok || !now.Before(r.at) {
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
