package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The pinner alone: built from the model and fakes of the small
// interfaces it is given, without the loop that decided its pins.

// stubPinRecords signs as stubSigner does and counts the registrations
// whose queue place it was asked to keep.
type stubPinRecords struct {
	stubSigner
	kept int
}

func (r *stubPinRecords) keepSubmitOfPin(*api.Job, uint64, uint64) { r.kept++ }

// stubStaging stages nothing: no group's holds wait, none is held.
type stubStaging struct{ unstaged int }

func (stubStaging) waitingFor(decide.Key) (holdWait, bool) { return holdWait{}, false }
func (stubStaging) stage(context.Context, *api.Job, []decide.Action) ([]string, map[decide.Key]error) {
	return nil, nil
}
func (s *stubStaging) unstage(context.Context, *api.Job, []string) { s.unstaged++ }

// stubPinAnswers keeps the reason said of each pinned group.
type stubPinAnswers map[decide.Key]string

func (a stubPinAnswers) place(k decide.Key, why string)            { a[k] = why }
func (a stubPinAnswers) stage(decide.Key) (lifecycle.Result, bool) { return lifecycle.Result{}, false }

// A pinner as leader writes a group's pin into its job, signed through
// the records, says its reason, registers it once and counts it
// unconfirmed; as follower it writes nothing to Nomad and counts nothing.
func TestPinnerAloneWritesSignsAndRegisters(t *testing.T) {
	for _, tc := range []struct {
		name string
		gate error
	}{{"leader", nil}, {"follower", ErrNotLeader}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
			f.put(gated("x", 25))
			s := newTestService(t, f)
			pins := decidedPins(t, s)
			must.SliceLen(t, 1, pins)
			must.Eq(t, 0, f.registers)

			recs, staging, answers := &stubPinRecords{}, &stubStaging{}, stubPinAnswers{}
			p := &pinner{c: s.cluster, nomad: f, records: recs, staging: staging, answers: answers, lease: stubGate{tc.gate},
				runtimes: &runtimes{c: s.cluster, cfg: s.cfg}, unconfirmed: &unconfirmed{}, metrics: newMetrics(),
				log: hclog.NewNullLogger(), now: func() time.Time { return time.Unix(2000, 0) },
				policy: s.loop.policy.Name(), timeout: time.Minute}
			key := pins[0].Group
			errs := p.pinJob(t.Context(), f.jobs["x"], pins)
			must.MapLen(t, 1, errs)
			must.NotEq(t, "", answers[key], must.Sprint("the pinned group's reason is said"))
			if tc.gate != nil {
				must.ErrorIs(t, errs[key], ErrNotLeader)
				must.Eq(t, 0, f.registers)
				must.Eq(t, 0, recs.kept)
				must.MapEmpty(t, p.unconfirmed.sent)
				must.Eq(t, []string{"g"}, pin.Gated(f.jobs["x"]))
				return
			}
			must.NoError(t, errs[key])
			must.Eq(t, 1, f.registers)
			must.Eq(t, 1, recs.kept)
			must.Eq(t, 0, staging.unstaged)
			must.Eq(t, time.Unix(2000, 0), p.unconfirmed.sent[key])
			must.SliceEmpty(t, pin.Gated(f.jobs["x"]))
			_, sig := pin.Carried(pin.Group(f.jobs["x"], "g"))
			must.True(t, strings.HasPrefix(sig, "sig:"+key.String()+":"), must.Sprint("signed through the records: ", sig))
		})
	}
}
