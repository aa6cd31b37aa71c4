package service

import (
	"context"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The stager and the view alone: each built from the model and fakes of
// the small interfaces it is given, without a loop or a service.

// stubHolds is holdNomad: it records the holds stopped.
type stubHolds struct{ stopped []string }

func (h *stubHolds) RegisterHold(context.Context, *api.Job) error { return nil }
func (h *stubHolds) JobAllocs(context.Context, string, string) ([]*api.AllocationListStub, error) {
	return nil, nil
}
func (h *stubHolds) StopJob(_ context.Context, _, id string) error {
	h.stopped = append(h.stopped, id)
	return nil
}

// stubSigner signs a payload with a fixed prefix; stubGate lets write or
// not; stubNotes keeps what the stager says of each group.
type stubSigner struct{}

func (stubSigner) sign(k decide.Key, payload string) (string, bool) {
	return "sig:" + k.String() + ":" + payload, true
}

type stubGate struct{ err error }

func (g stubGate) mayWrite() error { return g.err }

type stubNotes map[decide.Key]string

func (n stubNotes) placedWhy(decide.Key) string       { return "" }
func (n stubNotes) sayStage(k decide.Key, why string) { n[k] = why }

// A stager lets go, as the leader, only the holds it signed whose job is
// gone; a hold signed otherwise is not its to stop, and a follower stops
// none.
func TestStagerAloneReleasesItsOwnStaleHolds(t *testing.T) {
	key := decide.Key{Namespace: "default", Job: "gone", Group: "g"}
	hold := func(id string) *api.Job {
		j := holdJob(key, "0123456789abcdef", 0, holdSpec{node: "n1", shares: []string{"s1"}}, "raw_exec", 50)
		j.ID = &id
		j.Status = new("running")
		return j
	}
	own, foreign := hold(HoldPrefix+"own"), hold(HoldPrefix+"foreign")
	own.Meta[metaHoldSig], _ = stubSigner{}.sign(key, holdPayload(own))
	foreign.Meta[metaHoldSig] = "forged"
	for _, tc := range []struct {
		name    string
		gate    error
		stopped []string
	}{
		{"leader", nil, []string{HoldPrefix + "own"}},
		{"follower", ErrNotLeader, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &cluster{state: model.New()}
			c.setHolds([]*api.Job{own, foreign})
			h := &stubHolds{}
			st := newStager(stagerDeps{cluster: c, nomad: h, signer: stubSigner{}, lease: stubGate{tc.gate}, notes: stubNotes{},
				log: hclog.NewNullLogger(), now: func() time.Time { return time.Unix(1000, 0) }, timeout: time.Second, dirty: func() {}})
			st.releaseHolds(t.Context(), placement.NewSnapshot())
			must.Eq(t, tc.stopped, h.stopped)
			_, kept := c.holds[model.JobKey("default", HoldPrefix+"own")]
			must.Eq(t, tc.stopped == nil, kept, must.Sprint("a released hold leaves the book"))
			must.MapContainsKey(t, c.holds, model.JobKey("default", HoldPrefix+"foreign"))
		})
	}
}

// A Nomad client without hold calls stages nothing: no node may be
// staged on, and no group is told where it may not be.
func TestStagerWithoutHoldCallsStagesNothing(t *testing.T) {
	c := &cluster{state: model.New()}
	n := rawExec(t)
	c.state.PutNode(n)
	st := newStager(stagerDeps{cluster: c, nomad: struct{}{}, signer: stubSigner{}, lease: stubGate{}, notes: stubNotes{},
		log: hclog.NewNullLogger(), now: time.Now, timeout: time.Second, dirty: func() {}})
	must.False(t, st.canStage(n.ID))
	groups := []decide.Group{{Key: decide.Key{Namespace: "default", Job: "j", Group: "g"}, Req: placement.Request{Count: 2, Shares: 100}}}
	st.holdRules(placement.NewSnapshot(), groups)
	must.Nil(t, groups[0].Req.Unstaged)
	must.Eq(t, placement.Resources{}, groups[0].Req.HoldRes, must.Sprint("nothing a hold takes is counted without holds"))
}
