package pin

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// A time-sliced group's GPU task gets the quantum in its env, in whole
// milliseconds; the record lists it and says why; a re-pin does not stack
// it, a group without the opt-in gets none, a quantum the task sets itself
// is left as it is.
func TestPinWritesTimesliceQuantum(t *testing.T) {
	rt := Runtime{TimesliceQuantum: 1500 * time.Millisecond}
	j := runtimeJob("", 25)
	j.TaskGroups[0].Meta[MetaTimeslice] = "true"
	rec, err := PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	gpu, sidecar := j.TaskGroups[0].Tasks[1], j.TaskGroups[0].Tasks[0]
	must.Eq(t, map[string]string{EnvTimesliceQuantum: "1500"}, gpu.Env)
	must.MapEmpty(t, sidecar.Env)
	must.Eq(t, map[string]string{EnvTimesliceQuantum: "1500"}, rec.Env)
	must.StrContains(t, rec.Priority, "time-sliced: GPUSHARE_TIMESLICE_QUANTUM_MS=1500")

	// pinned again with another quantum: replaced, not stacked
	rt.TimesliceQuantum = 2 * time.Second
	_, err = PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.Eq(t, map[string]string{EnvTimesliceQuantum: "2000"}, gpu.Env)

	// the opt-in on the job counts too; "false" and no meta write nothing
	j = runtimeJob("", 25)
	j.Meta = map[string]string{MetaTimeslice: "true"}
	_, err = PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.Eq(t, "2000", j.TaskGroups[0].Tasks[1].Env[EnvTimesliceQuantum])
	for _, v := range []string{"false", ""} {
		j = runtimeJob("", 25)
		j.TaskGroups[0].Meta[MetaTimeslice] = v
		rec, err = PinWith(j, "g", quarter, rt)
		must.NoError(t, err)
		must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
		must.MapEmpty(t, rec.Env)
	}

	// the task's own quantum stays
	j = runtimeJob("", 25)
	j.TaskGroups[0].Meta[MetaTimeslice] = "true"
	j.TaskGroups[0].Tasks[1].Env = map[string]string{EnvTimesliceQuantum: "300"}
	rec, err = PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.Eq(t, "300", j.TaskGroups[0].Tasks[1].Env[EnvTimesliceQuantum])
	must.MapEmpty(t, rec.Env)
	must.StrContains(t, rec.Priority, "sets GPUSHARE_TIMESLICE_QUANTUM_MS=300 itself")

	// no quantum configured: nothing
	j = runtimeJob("", 25)
	j.TaskGroups[0].Meta[MetaTimeslice] = "true"
	_, err = PinWith(j, "g", quarter, Runtime{})
	must.NoError(t, err)
	must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
}
