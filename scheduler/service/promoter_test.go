package service

import (
	"context"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shoenig/test/must"
)

// fakeDeployments is Nomad as the promoter sees it: one job's latest
// deployment and the allocation of an older version.
type fakeDeployments struct {
	d        *api.Deployment
	older    *api.Allocation
	promoted []string
}

func (f *fakeDeployments) LatestDeployment(context.Context, string, string) (*api.Deployment, error) {
	return f.d, nil
}

func (f *fakeDeployments) PromoteAll(_ context.Context, _, id string) error {
	f.promoted = append(f.promoted, id)
	return nil
}

func (f *fakeDeployments) Alloc(context.Context, string) (*api.Allocation, error) {
	return f.older, nil
}

type neverLeads struct{}

func (neverLeads) mayWrite() error { return ErrNotLeader }

// The promoter alone, on a fake Nomad: a deployment of the scheduler's
// own pin is promoted once its canaries are healthy, said while they are
// not, never when the user changed the job, and never by a replica that
// may not write.
func TestPromoterAlone(t *testing.T) {
	job := gated("web", 25)
	user := gated("web", 25)
	user.TaskGroups[0].Tasks[0].Resources.CPU = ptr(200) // the user's change
	cand := promotion{namespace: "default", id: "web", version: 2,
		groups: map[string]canaryGroup{"g": {spec: pin.Spec(job, "g"), older: "a1"}}}
	deployment := func(healthy int) *api.Deployment {
		return &api.Deployment{ID: "0123456789ab", JobVersion: 2, Status: api.DeploymentStatusRunning,
			TaskGroups: map[string]*api.DeploymentState{"g": {DesiredCanaries: 1, HealthyAllocs: healthy, PlacedCanaries: []string{"c1"}}}}
	}
	key := decide.Key{Namespace: "default", Job: "web", Group: "g"}
	for _, c := range []struct {
		name     string
		lease    writeLease
		d        *api.Deployment
		older    *api.Job
		promoted int
		why      string
	}{
		{name: "healthy", lease: alwaysLeads{}, d: deployment(1), older: job, promoted: 1, why: "gpushare promoted deployment 01234567"},
		{name: "not yet healthy", lease: alwaysLeads{}, d: deployment(0), older: job, why: "1 placed and 0 healthy"},
		{name: "the user's change", lease: alwaysLeads{}, d: deployment(1), older: user},
		{name: "follower", lease: neverLeads{}, d: deployment(1), older: job},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeDeployments{d: c.d, older: &api.Allocation{ID: "a1", Job: c.older}}
			counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "promotions"})
			changed := 0
			pr := promoter{nomad: f, lease: c.lease, log: hclog.NewNullLogger(), timeout: time.Second,
				promoted: counter, changed: func() { changed++ }}
			whys := pr.promote(t.Context(), []promotion{cand})
			must.SliceLen(t, c.promoted, f.promoted)
			must.Eq(t, c.promoted, changed)
			if c.why == "" {
				must.MapEmpty(t, whys)
				return
			}
			must.StrContains(t, whys[key], c.why)
		})
	}
}

var _ deployments = (*fakeDeployments)(nil)
