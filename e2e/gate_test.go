package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// TestTheGateIsNotEscaped: Nomad keeps a gated group's blocked evaluation
// by node class, so capacity freed anywhere does not run it again until
// its job changes (the pin's registration). A group behind the gate
// written before (${node.unique.id} = gpushare:pending) is "escaped": Nomad
// runs it again on every allocation that ends, which under churn queued
// thousands of useless evaluations ahead of the pins. That gate still
// works: the scheduler pins such a group like any other.
func TestTheGateIsNotEscaped(t *testing.T) {
	e := newEnv(t)
	var current, legacy []string
	for i := range 3 {
		id := fmt.Sprintf("gate-new-%d", i)
		job := e.register(id, map[string]any{"shares": 10})
		must.Eq(t, []string{"g"}, pin.Gated(job))
		current = append(current, id)
	}
	for i := range 2 {
		id := fmt.Sprintf("gate-old-%d", i)
		job := e.parse(id, map[string]any{"shares": 10})
		tg := job.TaskGroups[0]
		tg.Constraints = slices.DeleteFunc(tg.Constraints, pin.IsGate)
		tg.Constraints = append(tg.Constraints, &api.Constraint{LTarget: pin.LegacyGateAttribute, Operand: "=", RTarget: pin.LegacyGateValue})
		_, _, err := e.nomad.Jobs().Register(job, nil)
		must.NoError(t, err)
		legacy = append(legacy, id)
	}
	// no scheduler yet: all five wait, and only the two behind the old
	// gate are escaped
	var b brokerGauges
	e.eventually(time.Minute, "five blocked evaluations, two of them escaped", func() bool {
		var err error
		b, err = readBroker(e.nomad)
		return err == nil && b.blocked >= 5 && b.escaped == 2
	})
	t.Logf("blocked evaluations: %d, escaped: %d", b.blocked, b.escaped)

	before := map[string]int{}
	for _, id := range append(slices.Clone(current), legacy...) {
		before[id] = e.evaluated(id)
	}
	// capacity frees: a short job ends on some node
	free := api.NewBatchJob("gate-free", "gate-free", "global", 50)
	free.Datacenters = []string{"*"}
	free.AddTaskGroup(api.NewTaskGroup("g", 1).AddTask(
		api.NewTask("t", "raw_exec").SetConfig("command", "/bin/true").
			Require(&api.Resources{CPU: ptr(20), MemoryMB: ptr(16)})))
	_, _, err := e.nomad.Jobs().Register(free, nil)
	must.NoError(t, err)
	e.eventually(time.Minute, "the old gate's groups evaluated again after the short job ended", func() bool {
		for _, id := range legacy {
			if e.evaluated(id) == before[id] {
				return false
			}
		}
		return true
	})
	// the same freed capacity unblocked the escaped evaluations above; the
	// groups behind today's gate were not evaluated again
	for _, id := range current {
		must.Eq(t, before[id], e.evaluated(id), must.Sprintf("%s was evaluated again when capacity freed", id))
	}
	for _, id := range legacy {
		t.Logf("%s evaluated %d times before the short job, %d after", id, before[id], e.evaluated(id))
	}

	e.startScheduler("s1", "")
	for _, id := range append(current, legacy...) {
		allocs := e.running(id, 1, 3*time.Minute)
		job, _, err := e.nomad.Jobs().Info(id, nil)
		must.NoError(t, err)
		must.SliceEmpty(t, pin.Gated(job), must.Sprintf("%s still gated while running", id))
		must.True(t, pin.Pinned(job, "g"), must.Sprintf("%s runs on %s without a pin", id, allocs[0].NodeID))
	}
}

// evaluated counts the times Nomad's scheduler worker took an evaluation
// of job id, from the server's log (debug level): a blocked evaluation run
// again and blocked again leaves no trace in the evaluations' list.
func (e *env) evaluated(id string) int {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.c.Dir(), "server", "nomad.log"))
	must.NoError(e.t, err)
	n := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "worker: dequeued evaluation:") && strings.Contains(line, " job_id="+id+" ") {
			n++
		}
	}
	return n
}
