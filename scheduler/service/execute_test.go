package service

import (
	"context"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// deadlineNomad is a Nomad whose registrations hang until their context
// ends (the job is edited meanwhile) and whose reads fail on a context
// that has ended, as the HTTP client's do.
type deadlineNomad struct {
	*fakeNomad
	edit func()
}

func (d *deadlineNomad) Register(ctx context.Context, _ *api.Job, _ uint64) (uint64, error) {
	if d.edit != nil {
		d.edit()
		d.edit = nil
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

func (d *deadlineNomad) Job(ctx context.Context, ns, id string) (*api.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.fakeNomad.Job(ctx, ns, id)
}

// After a registration that timed out, the job is read again with a
// request of its own: the model learns the version Nomad holds (here a
// user's edit made while the registration hung).
func TestTimedOutPinReadsTheJobAgain(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	f.put(gated("x", 25))
	d := &deadlineNomad{fakeNomad: f}
	d.edit = func() {
		edited, err := copyJob(f.jobs["x"])
		must.NoError(t, err)
		edited.Meta["owner"] = "someone"
		f.put(edited)
	}
	cfg := config.Default()
	cfg.Nomad.RequestTimeout = "100ms"
	s, err := newService(cfg, hclog.NewNullLogger(), d, time.Now)
	must.NoError(t, err)
	must.NoError(t, s.resync(t.Context()))
	s.reconcile(t.Context())
	must.StrContains(t, s.pending[key("x")], "deadline exceeded")
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.state.Jobs[model.JobKey("default", "x")]
	must.Eq(t, *f.jobs["x"].JobModifyIndex, *got.JobModifyIndex)
	must.Eq(t, "someone", got.Meta["owner"])
	must.Eq(t, []string{"g"}, pin.Gated(got))
}
