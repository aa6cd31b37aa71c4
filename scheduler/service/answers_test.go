package service

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/lifecycle"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A pass's answers replace the last pass's whole, but why pinned groups
// are where they are, which is noted as they are pinned and kept until
// their job is gone; a stage's reason changes only for a group the pass
// found.
func TestAnswersKeepTheLastPass(t *testing.T) {
	var mu timedMutex
	a := newAnswers(&mu)
	a.publish(map[decide.Key]string{key("b"): "no room", key("a"): "queued"}, map[decide.Key]queuePos{key("a"): {Position: 1, Of: 2}})
	must.Eq(t, []decide.Key{key("a"), key("b")}, a.waitingGroups())
	p, ok := a.position(key("a"))
	must.True(t, ok)
	must.Eq(t, queuePos{Position: 1, Of: 2}, p)
	a.publish(map[decide.Key]string{key("c"): "new"}, nil)
	must.Eq(t, "", a.waits(key("a")))
	_, ok = a.position(key("a"))
	must.False(t, ok)

	a.setStages(map[decide.Key]lifecycle.Result{key("a"): {State: lifecycle.Waiting}})
	a.sayStage(key("a"), "staged")
	a.sayStage(key("z"), "not found by the pass")
	st, ok := a.stage(key("a"))
	must.True(t, ok)
	must.Eq(t, "staged", st.Why)
	_, ok = a.stage(key("z"))
	must.False(t, ok)

	a.place(key("a"), "NV2 pair")
	a.readNotes(map[decide.Key]string{key("d"): "leader's"}, map[decide.Key]string{key("gone"): "leader's placement"})
	must.Eq(t, "leader's", a.waits(key("d")))
	st2 := model.New()
	id := "a"
	st2.Jobs[model.JobKey("default", "a")] = &api.Job{ID: &id}
	a.sweep(st2)
	_, placed := a.notes()
	must.Eq(t, map[decide.Key]string{key("a"): "NV2 pair"}, placed)
}
