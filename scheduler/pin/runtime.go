package pin

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Environment the pin writes into the GPU task of an opportunistic group
// placed on MPS GPUs, so that a production job sharing the GPU keeps the
// GPU's attention at run time (TGS).
const (
	// EnvMPSClientPriority 1 is CUDA's below-normal MPS client priority
	// (0 is normal). The plugin's Reserve never sets it, so the task's env
	// block, where the pin writes it, takes effect.
	EnvMPSClientPriority = "CUDA_MPS_CLIENT_PRIORITY"
	// EnvMPSThreads is set by the plugin's Reserve for the fraction. In
	// Nomad 1.11 a device plugin's env overrides the task's env block
	// (client/taskenv buildEnv: task env, then hook env, then template
	// env), so the pin lowers it with a template rendered to
	// ThreadsTemplate with env = true, the one task env that wins.
	EnvMPSThreads = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// ThreadsTemplate is the destination of that template.
	ThreadsTemplate = "local/gpushare-mps.env"
	// EnvTimesliceQuantum is the quantum, in whole milliseconds, the pin
	// writes into the GPU task of a time-sliced group (MetaTimeslice): the
	// interposer time-slices the task's launches with the other
	// time-sliced tasks of its GPU, one quantum each
	// (plugin/interposer/README.md, "Time-slicing"). Absent, the task is
	// not time-sliced.
	EnvTimesliceQuantum = "GPUSHARE_TIMESLICE_QUANTUM_MS"
)

// Runtime is what the pin writes into a group's GPU task besides the
// pins: the run-time priority of an opportunistic group on the GPUs the
// decision chose. The zero value writes nothing.
type Runtime struct {
	// Sharing is the sharing mode of every GPU the decision chose; "" when
	// they differ or are unknown (nothing is written then).
	Sharing string
	// SharesPerGPU is those GPUs' shares_per_gpu.
	SharesPerGPU int
	// ClientPriority is the CUDA_MPS_CLIENT_PRIORITY of opportunistic
	// groups on MPS GPUs; 0 writes none.
	ClientPriority int
	// ThreadScale, within (0, 1], scales the CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
	// the plugin gives an opportunistic fraction on an MPS GPU (0.5: half
	// the fraction's percentage); 0 leaves the plugin's.
	ThreadScale float64
	// TimesliceQuantum is the quantum written into a time-sliced group's
	// GPU task (EnvTimesliceQuantum, whole milliseconds, at least 1); 0
	// writes none.
	TimesliceQuantum time.Duration
}

// timesliceEnv adds to env the quantum of a time-sliced group (meta
// MetaTimeslice "true") and says so in note; a quantum the task sets
// itself (user) is left as the task sets it.
func (rt Runtime) timesliceEnv(meta, user, env map[string]string, note string) (map[string]string, string) {
	if meta[MetaTimeslice] != "true" || rt.TimesliceQuantum <= 0 {
		return env, note
	}
	line := ""
	if v, ok := user[EnvTimesliceQuantum]; ok {
		line = fmt.Sprintf("time-sliced: the task sets %s=%s itself: left as is", EnvTimesliceQuantum, v)
	} else {
		ms := strconv.FormatInt(max(1, rt.TimesliceQuantum.Milliseconds()), 10)
		if env == nil {
			env = map[string]string{}
		}
		env[EnvTimesliceQuantum] = ms
		line = "time-sliced: " + EnvTimesliceQuantum + "=" + ms
	}
	if note != "" {
		note += "; "
	}
	return env, note + line
}

// runtimeEnv decides the environment an opportunistic group's GPU task
// gets, and says why in a line for the placement record. user is the
// task's own env: a variable the task sets itself is never written.
func (rt Runtime) runtimeEnv(class string, shares int, user map[string]string) (map[string]string, string) {
	if class != string(placement.ClassOpportunistic) {
		return nil, ""
	}
	switch rt.Sharing {
	case devicefn.SharingMPS:
	case devicefn.SharingTimeslice:
		return nil, "opportunistic on time-sliced GPUs: CUDA has no per-process priority there, nothing written (use sharing = \"mps\" or MIG to protect production)"
	case "":
		return nil, "opportunistic on GPUs of mixed or unknown sharing modes: no priority written"
	default:
		return nil, ""
	}
	env, notes := map[string]string{}, []string{}
	if rt.ClientPriority > 0 {
		if v, ok := user[EnvMPSClientPriority]; ok {
			notes = append(notes, fmt.Sprintf("the task sets %s=%s itself: left as is", EnvMPSClientPriority, v))
		} else {
			env[EnvMPSClientPriority] = strconv.Itoa(rt.ClientPriority)
		}
	}
	if rt.ThreadScale > 0 && rt.SharesPerGPU > 0 && shares < rt.SharesPerGPU {
		if v, ok := user[EnvMPSThreads]; ok {
			notes = append(notes, fmt.Sprintf("the task sets %s=%s itself: left as is", EnvMPSThreads, v))
		} else {
			env[EnvMPSThreads] = strconv.Itoa(ScaledThreads(shares, rt.SharesPerGPU, rt.ThreadScale))
		}
	}
	var note string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		note += fmt.Sprintf("%s=%s ", k, env[k])
	}
	if note != "" {
		note = "opportunistic on MPS: " + note[:len(note)-1]
	}
	for _, n := range notes {
		if note != "" {
			note += "; "
		}
		note += n
	}
	if len(env) == 0 {
		env = nil
	}
	return env, note
}

// ScaledThreads is the CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of a fraction of
// shares out of sharesPerGPU scaled by scale: the plugin's percentage
// (ceil(100 * shares / sharesPerGPU)) times scale, rounded up, at least 1.
func ScaledThreads(shares, sharesPerGPU int, scale float64) int {
	base := int(math.Ceil(100 * float64(min(shares, sharesPerGPU)) / float64(sharesPerGPU)))
	// round away float noise (30 * 0.1 is 3.0000000000000004) before ceil
	pct := int(math.Ceil(math.Round(float64(base)*scale*1e6) / 1e6))
	return max(1, min(pct, 100))
}

// gpuTask is the task that asks for the gpushare device.
func gpuTask(tg *api.TaskGroup) *api.Task {
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if isOurs(d.Name) {
				return t
			}
		}
	}
	return nil
}

// writeEnv puts env into the task: the thread percentage as the
// ThreadsTemplate template, the rest into its env block. A variable the
// task sets itself is left as the task sets it: what an earlier pin wrote
// was taken out first (unpin), so what is left is the user's — a pin
// written back unchanged (Repeat) never overwrites it either.
func writeEnv(t *api.Task, env map[string]string) {
	for k, v := range env {
		if _, own := t.Env[k]; own {
			continue
		}
		if k == EnvMPSThreads {
			t.Templates = append(t.Templates, &api.Template{
				EmbeddedTmpl: ref(k + "=" + v + "\n"),
				DestPath:     ref(ThreadsTemplate),
				Envvars:      ref(true),
				ChangeMode:   ref("noop"),
			})
			continue
		}
		if t.Env == nil {
			t.Env = map[string]string{}
		}
		t.Env[k] = v
	}
}

// stripEnv removes from the group's GPU task what the pin recorded in rec
// writing, as long as the task still has the value the pin wrote.
func stripEnv(tg *api.TaskGroup, rec *Record) {
	t := gpuTask(tg)
	if t == nil {
		return
	}
	t.Templates = slices.DeleteFunc(t.Templates, func(tp *api.Template) bool {
		return tp != nil && tp.DestPath != nil && *tp.DestPath == ThreadsTemplate
	})
	if rec == nil {
		return
	}
	for k, v := range rec.Env {
		if got, ok := t.Env[k]; ok && got == v {
			delete(t.Env, k)
		}
	}
	if len(t.Env) == 0 {
		t.Env = nil
	}
}

func ref[T any](v T) *T { return &v }
