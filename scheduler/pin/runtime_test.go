package pin

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// runtimeJob is job(shares) of the given class.
func runtimeJob(class string, shares int64) *api.Job {
	j := job(shares)
	j.TaskGroups[0].Meta[MetaClass] = class
	return j
}

var quarter = &placement.Decision{Policy: "gpushare", Placements: []placement.Placement{
	{Node: "n1", GPUs: []string{"GPU-a"}, Shares: []string{"GPU-a:0", "GPU-a:1"}},
}}

func mps(scale float64) Runtime {
	return Runtime{Sharing: devicefn.SharingMPS, SharesPerGPU: 100, ClientPriority: 1, ThreadScale: scale}
}

func threadsTemplates(t *api.Task) []*api.Template {
	var out []*api.Template
	for _, tp := range t.Templates {
		if tp.DestPath != nil && *tp.DestPath == ThreadsTemplate {
			out = append(out, tp)
		}
	}
	return out
}

func TestPinWritesPriorityForOpportunisticOnMPS(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	rec, err := PinWith(j, "g", quarter, mps(0))
	must.NoError(t, err)
	gpu, sidecar := j.TaskGroups[0].Tasks[1], j.TaskGroups[0].Tasks[0]
	must.Eq(t, map[string]string{EnvMPSClientPriority: "1"}, gpu.Env)
	must.MapEmpty(t, sidecar.Env) // only the task that uses the GPU
	must.SliceEmpty(t, threadsTemplates(gpu))
	must.Eq(t, map[string]string{EnvMPSClientPriority: "1"}, rec.Env)
	must.StrContains(t, rec.Priority, "CUDA_MPS_CLIENT_PRIORITY=1")
	stored, ok := ParseRecord(j, "g")
	must.True(t, ok)
	must.Eq(t, rec.Env, stored.Env)
}

func TestPinWritesNoPriorityForProduction(t *testing.T) {
	for _, class := range []string{"production", ""} {
		j := runtimeJob(class, 25)
		rec, err := PinWith(j, "g", quarter, mps(0.5))
		must.NoError(t, err)
		must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
		must.SliceEmpty(t, j.TaskGroups[0].Tasks[1].Templates)
		must.MapEmpty(t, rec.Env)
		must.EqOp(t, "", rec.Priority)
	}
}

func TestPinWritesNoPriorityOnTimeslice(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	rt := mps(0.5)
	rt.Sharing = devicefn.SharingTimeslice
	rec, err := PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
	must.SliceEmpty(t, j.TaskGroups[0].Tasks[1].Templates)
	must.StrContains(t, rec.Priority, "no per-process priority")

	rt.Sharing = "" // mixed modes: nothing either
	rec, err = PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
	must.StrContains(t, rec.Priority, "mixed")
}

// The lowered thread percentage goes through a template with env = true:
// Nomad lets the plugin's env override the task's env block.
func TestPinLowersThreadPercentageThroughTemplate(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	rec, err := PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	gpu := j.TaskGroups[0].Tasks[1]
	tps := threadsTemplates(gpu)
	must.SliceLen(t, 1, tps)
	must.Eq(t, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=13\n", *tps[0].EmbeddedTmpl)
	must.True(t, *tps[0].Envvars)
	must.MapNotContainsKey(t, gpu.Env, EnvMPSThreads)
	must.Eq(t, map[string]string{EnvMPSClientPriority: "1", EnvMPSThreads: "13"}, rec.Env)

	// a whole GPU is never shared: its percentage stays the plugin's
	j = runtimeJob("opportunistic", 100)
	rec, err = PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	must.SliceEmpty(t, threadsTemplates(j.TaskGroups[0].Tasks[1]))
	must.Eq(t, map[string]string{EnvMPSClientPriority: "1"}, rec.Env)
}

func TestScaledThreads(t *testing.T) {
	for _, c := range []struct {
		shares, perGPU int
		scale          float64
		want           int
	}{
		{25, 100, 0.5, 13}, {30, 100, 0.1, 3}, {1, 100, 0.5, 1}, {50, 100, 1, 50}, {1, 3, 0.5, 17}, {99, 100, 0.01, 1},
	} {
		must.EqOp(t, c.want, ScaledThreads(c.shares, c.perGPU, c.scale), must.Sprintf("%+v", c))
	}
}

func TestPinAgainIsIdempotentAndRepinToTimesliceRemoves(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	gpu := j.TaskGroups[0].Tasks[1]
	gpu.Env = map[string]string{"MODEL": "bert"}
	_, err := PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	first := j.TaskGroups[0].Meta[MetaPlacement]
	_, err = PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	must.EqOp(t, first, j.TaskGroups[0].Meta[MetaPlacement])
	must.Eq(t, map[string]string{"MODEL": "bert", EnvMPSClientPriority: "1"}, gpu.Env)
	must.SliceLen(t, 1, threadsTemplates(gpu))

	rt := mps(0.5)
	rt.Sharing = devicefn.SharingTimeslice
	rec, err := PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.Eq(t, map[string]string{"MODEL": "bert"}, gpu.Env) // the user's stays
	must.SliceEmpty(t, threadsTemplates(gpu))
	must.MapEmpty(t, rec.Env)
}

func TestUnpinRemovesPriority(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	_, err := PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	Unpin(j, "g")
	gpu := j.TaskGroups[0].Tasks[1]
	must.MapEmpty(t, gpu.Env)
	must.SliceEmpty(t, gpu.Templates)
	// gated again, the group is placed anew and gets it back
	_, err = PinWith(j, "g", quarter, mps(0))
	must.NoError(t, err)
	must.Eq(t, map[string]string{EnvMPSClientPriority: "1"}, gpu.Env)
}

// A task that sets CUDA_MPS_CLIENT_PRIORITY itself keeps its value: the
// service never fights a user's explicit setting, and says so.
func TestPinLeavesUsersOwnPriority(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	gpu := j.TaskGroups[0].Tasks[1]
	gpu.Env = map[string]string{EnvMPSClientPriority: "0"}
	rec, err := PinWith(j, "g", quarter, mps(0))
	must.NoError(t, err)
	must.Eq(t, map[string]string{EnvMPSClientPriority: "0"}, gpu.Env)
	must.MapEmpty(t, rec.Env)
	must.StrContains(t, rec.Priority, "the task sets CUDA_MPS_CLIENT_PRIORITY=0 itself")
	// and a re-pin does not take it for the scheduler's
	_, err = PinWith(j, "g", quarter, mps(0))
	must.NoError(t, err)
	must.Eq(t, map[string]string{EnvMPSClientPriority: "0"}, gpu.Env)
}

func TestPinWithZeroRuntimeWritesNothing(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	_, err := Pin(j, "g", quarter)
	must.NoError(t, err)
	must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
	rt := mps(0)
	rt.ClientPriority = 0 // mps_client_priority = 0: off
	_, err = PinWith(j, "g", quarter, rt)
	must.NoError(t, err)
	must.MapEmpty(t, j.TaskGroups[0].Tasks[1].Env)
}

// A pin written back unchanged (a group registered again as it was) never
// overwrites the priority or thread percentage the task now sets itself.
func TestRepeatLeavesUsersOwnPriority(t *testing.T) {
	j := runtimeJob("opportunistic", 25)
	_, err := PinWith(j, "g", quarter, mps(0.5))
	must.NoError(t, err)
	placementMeta, signature := j.TaskGroups[0].Meta[MetaPlacement], "sig"
	again := runtimeJob("opportunistic", 25)
	again.TaskGroups[0].Tasks[1].Env = map[string]string{EnvMPSClientPriority: "0", EnvMPSThreads: "40"}
	_, err = Repeat(again, "g", placementMeta, signature)
	must.NoError(t, err)
	gpu := again.TaskGroups[0].Tasks[1]
	must.Eq(t, map[string]string{EnvMPSClientPriority: "0", EnvMPSThreads: "40"}, gpu.Env)
	must.SliceEmpty(t, threadsTemplates(gpu))
	must.Eq(t, placementMeta, again.TaskGroups[0].Meta[MetaPlacement])
}
