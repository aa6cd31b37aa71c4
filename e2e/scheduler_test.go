package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

// Scenario 1: four 25-share jobs end up on one GPU; a fifth goes to
// another GPU.
func TestSchedulerPacksFractions(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	var first string
	for i := range 4 {
		id := fmt.Sprintf("quarter-%d", i)
		e.register(id, map[string]any{"shares": 25})
		a := e.running(id, 1, 60*time.Second)[0]
		g := gpus(a)
		must.SliceLen(t, 1, g)
		if i == 0 {
			first = g[0]
		}
		must.Eq(t, first, g[0], must.Sprintf("quarter-%d went to another GPU", i))
		env := taskEnvOf(t, e, a, "work")
		must.Eq(t, "0.25", env["GPUSHARE_FRACTION"])
		must.Eq(t, g[0], env["CUDA_VISIBLE_DEVICES"])
	}
	e.register("quarter-4", map[string]any{"shares": 25})
	a := e.running("quarter-4", 1, 60*time.Second)[0]
	must.SliceLen(t, 1, gpus(a))
	must.NotEq(t, first, gpus(a)[0])

	// the placement and its reason are in the job and in the API
	job, _, err := e.nomad.Jobs().Info("quarter-4", nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, "gpushare", rec.Policy)
	must.SliceLen(t, 25, rec.Shares)
}

// Scenario 2: a 2-GPU job pinned to the DGX-1 gets an NV2 pair; a 4-GPU
// job gets a fully NVLink-connected quad on one socket.
func TestSchedulerTopologyCells(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	e.register("pair", map[string]any{"shares": 200, "model": modelV100})
	a := e.running("pair", 1, 60*time.Second)[0]
	g := gpus(a)
	must.SliceLen(t, 2, g)
	grp := e.group(a.NodeID)
	l, n0, n1 := link(grp, g[0], g[1])
	must.Eq(t, "NV2", l.String(), must.Sprintf("pair %v", g))
	must.Eq(t, n0, n1)
	env := taskEnvOf(t, e, a, "work")
	must.Eq(t, "2", env["GPUSHARE_FRACTION"])

	e.register("quad", map[string]any{"shares": 400, "model": modelV100})
	q := gpus(e.running("quad", 1, 60*time.Second)[0])
	must.SliceLen(t, 4, q)
	for i := range q {
		for j := i + 1; j < len(q); j++ {
			l, ni, nj := link(grp, q[i], q[j])
			must.Eq(t, devicefn.LinkNVLink, l.Kind, must.Sprintf("quad %v: %s-%s is %s", q, q[i], q[j], l))
			must.Eq(t, ni, nj, must.Sprintf("quad %v crosses sockets", q))
		}
	}
}

// Scenario 3: two compute-heavy production jobs are not put on one GPU
// while an empty GPU exists; a light and a heavy job are.
func TestSchedulerInterference(t *testing.T) {
	e := newEnv(t)
	e.startScheduler("s1", "")
	heavy := map[string]any{"shares": 40, "model": modelP100, "class": "production", "sm_util": "0.9", "mem_bw": "0.7"}
	e.register("heavy-a", heavy)
	ga := gpus(e.running("heavy-a", 1, 60*time.Second)[0])
	e.register("heavy-b", heavy)
	gb := gpus(e.running("heavy-b", 1, 60*time.Second)[0])
	must.NotEq(t, ga[0], gb[0], must.Sprint("two heavy production jobs share a GPU while others are empty"))

	e.register("light", map[string]any{"shares": 40, "model": modelP100, "class": "production", "sm_util": "0.1", "mem_bw": "0.05"})
	gl := gpus(e.running("light", 1, 60*time.Second)[0])
	must.True(t, gl[0] == ga[0] || gl[0] == gb[0], must.Sprintf("light job on %s, not with a heavy one (%s, %s)", gl[0], ga[0], gb[0]))
	job, _, err := e.nomad.Jobs().Info("light", nil)
	must.NoError(t, err)
	rec, _ := pin.ParseRecord(job, "g")
	must.StrContains(t, rec.Reason, "predicted")
}
