package e2e

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/shoenig/test/must"
)

// Production is protected at run time (TGS): an opportunistic job the
// scheduler pins next to a production one on an MPS GPU runs with the
// below-normal MPS client priority and, as configured, half its fraction's
// thread percentage (a template env, which overrides the plugin's); the
// production job keeps the plugin's environment.
func TestSchedulerOpportunisticPriority(t *testing.T) {
	e := newEnv(t)
	// a bound with room for the model's uncertainty (0.19), so that the
	// two profiled jobs may share a GPU
	e.startScheduler("s1", "production_max_slowdown = 0.3\nopportunistic {\n  active_thread_scale = 0.5\n}\n")
	e.register("serving", map[string]any{"shares": 50, "model": modelP100, "class": "production", "sm_util": "0.2", "mem_bw": "0.1"})
	prod := e.running("serving", 1, 60*time.Second)[0]
	e.register("scavenger", map[string]any{"shares": 25, "model": modelP100, "class": "opportunistic", "sm_util": "0.1", "mem_bw": "0.05"})
	opp := e.running("scavenger", 1, 60*time.Second)[0]
	must.Eq(t, gpus(prod), gpus(opp), must.Sprint("the two jobs do not share a GPU"))

	oppEnv := taskEnvOf(t, e, opp, "work")
	must.Eq(t, "mps", oppEnv["GPUSHARE_SHARING"])
	must.Eq(t, "1", oppEnv[pin.EnvMPSClientPriority])
	must.Eq(t, "13", oppEnv[pin.EnvMPSThreads]) // ceil(25 * 0.5), not the plugin's 25

	prodEnv := taskEnvOf(t, e, prod, "work")
	must.MapNotContainsKey(t, prodEnv, pin.EnvMPSClientPriority)
	must.Eq(t, "50", prodEnv[pin.EnvMPSThreads])

	job, _, err := e.nomad.Jobs().Info("scavenger", nil)
	must.NoError(t, err)
	rec, ok := pin.ParseRecord(job, "g")
	must.True(t, ok)
	must.Eq(t, map[string]string{pin.EnvMPSClientPriority: "1", pin.EnvMPSThreads: "13"}, rec.Env)
}
