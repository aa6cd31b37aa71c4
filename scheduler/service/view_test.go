package service

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/shoenig/test/must"
)

// stubAnswers is lastAnswers with fixed answers; stubRefused says which
// groups were refused for good.
type stubAnswers struct {
	pending   map[decide.Key]string
	positions map[decide.Key]queuePos
	read      uint64
}

func (a stubAnswers) stage(decide.Key) (lifecycle.Result, bool) { return lifecycle.Result{}, false }
func (a stubAnswers) placedWhy(decide.Key) string               { return "" }
func (a stubAnswers) waits(k decide.Key) string                 { return a.pending[k] }
func (a stubAnswers) waitingGroups() []decide.Key {
	return []decide.Key{{Namespace: "default", Job: "a", Group: "g"}, {Namespace: "default", Job: "b", Group: "g"}, {Namespace: "other", Job: "c", Group: "g"}}
}
func (a stubAnswers) position(k decide.Key) (queuePos, bool) { p, ok := a.positions[k]; return p, ok }
func (a stubAnswers) decided() uint64                        { return a.read }

type stubRefused map[decide.Key]bool

func (r stubRefused) refusedForGood(k decide.Key) (refusal, bool) { return refusal{}, r[k] }

type stubLeader bool

func (l stubLeader) isLeader() bool { return bool(l) }

// The view alone: /v1/groups lists the groups of the managed namespaces
// that its answers say wait, refused ones as refused and without a
// queue place; /v1/health says the index the last pass read and whether
// this replica leads.
func TestAPIViewAloneAnswersFromItsParts(t *testing.T) {
	a := decide.Key{Namespace: "default", Job: "a", Group: "g"}
	b := decide.Key{Namespace: "default", Job: "b", Group: "g"}
	answers := stubAnswers{read: 7,
		pending:   map[decide.Key]string{a: "no room", b: "never fits"},
		positions: map[decide.Key]queuePos{a: {Position: 1, Of: 2}, b: {Position: 2, Of: 2}}}
	c := &cluster{state: model.New()}
	c.synced = true
	cfg := config.Default()
	cfg.Nomad.Namespaces = []string{"default"}
	v := &apiView{c: c, cfg: cfg, lease: stubLeader(true), answers: answers, refusals: stubRefused{b: true}}
	must.Eq(t, []Waiting{
		{Namespace: "default", Job: "a", Group: "g", State: "pending", Reason: "no room", Position: 1, Of: 2},
		{Namespace: "default", Job: "b", Group: "g", State: "refused", Reason: "never fits"},
	}, v.waiting(), must.Sprint("namespace other is not managed"))
	h := v.health()
	must.Eq(t, uint64(7), h.Decided)
	must.True(t, h.Leader)
	must.True(t, h.Synced)
}
