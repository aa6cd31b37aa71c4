package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// An allocation gated away counts as stopping until Nomad stopped it (it
// is gone from the model, or no longer live) or stoppingFor has passed.
func TestStoppingExpires(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	state := model.New()
	for id, a := range map[string]*api.Allocation{
		"running":  {ClientStatus: api.AllocClientStatusRunning},
		"stopping": {ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusStop},
		"old":      {ClientStatus: api.AllocClientStatusRunning},
	} {
		a.ID, a.Namespace, a.JobID, a.TaskGroup = id, "default", "j", "g"
		state.PutAlloc(a)
	}
	st := stopping{}
	st.stop([]string{"running", "stopping", "gone"}, now.Add(-time.Minute))
	st.stop([]string{"old"}, now.Add(-stoppingFor-time.Second))
	st.expire(state, now)
	must.Eq(t, stopping{"running": now.Add(-time.Minute)}, st)
	must.True(t, st.has("running"))
	must.False(t, st.has("old"))
}

// A follower takes the leader's allocations being stopped, and keeps its
// own time for those it stopped itself.
func TestStoppingMergeKeepsOwnTimes(t *testing.T) {
	mine, theirs := time.Unix(100, 0), time.Unix(200, 0)
	st := stopping{"both": mine, "only-mine": mine}
	got := st.merge(stopping{"both": theirs, "only-theirs": theirs})
	must.Eq(t, stopping{"both": mine, "only-theirs": theirs}, got)
}

// The log keeps the last maxPreemptions, oldest first, and hands out
// copies.
func TestPreemptionLogKeepsTheLast(t *testing.T) {
	var l preemptionLog
	at := time.Unix(1_700_000_000, 0)
	guaranteed := decide.Key{Namespace: "prod", Job: "train", Group: "g"}
	for i := range maxPreemptions + 5 {
		l.note(decide.Key{Namespace: "default", Job: fmt.Sprint("j", i), Group: "g"}, []string{fmt.Sprint("a", i)}, guaranteed, at.Add(time.Duration(i)*time.Second))
	}
	got := l.recent()
	must.SliceLen(t, maxPreemptions, got)
	must.Eq(t, "j5", got[0].Job)
	must.Eq(t, fmt.Sprint("j", maxPreemptions+4), got[len(got)-1].Job)
	must.Eq(t, guaranteed.String(), got[0].For)
	must.Eq(t, "prod", got[0].forNamespace)
	got[0].Job = "changed"
	must.Eq(t, "j5", l.recent()[0].Job)
}
