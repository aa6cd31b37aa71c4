package jobspecs

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/interference"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
)

// Severity of a finding.
type Severity string

const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one problem in a jobspec.
type Finding struct {
	Severity Severity `json:"severity"`
	Group    string   `json:"group,omitempty"`
	Message  string   `json:"message"`
	// Meta and Device name the meta key or the device block the finding
	// is about, when it is about one (Lines finds its line).
	Meta   string `json:"meta,omitempty"`
	Device string `json:"device,omitempty"`
	// Line is the line of the jobspec it is about (0: unknown), set by
	// Locate.
	Line int `json:"line,omitempty"`
}

// Locate sets each finding's Line from the jobspec's source.
func Locate(fs []Finding, l *Lines) {
	for i := range fs {
		fs[i].Line = l.Line(fs[i])
	}
}

// In is the finding as a line of output about file: "file:line: ...".
func (f Finding) In(file string) string {
	if f.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, f.Line, f)
	}
	return fmt.Sprintf("%s: %s", file, f)
}

func (f Finding) String() string {
	where := "job"
	if f.Group != "" {
		where = "group " + f.Group
	}
	return fmt.Sprintf("%s: %s: %s", f.Severity, where, f.Message)
}

// Lint checks how a job asks for gpushare devices. sharesPerGPU is the
// cluster's shares_per_gpu (100 unless the plugin is configured otherwise).
func Lint(job *api.Job, sharesPerGPU int) []Finding { return LintWith(job, sharesPerGPU, nil) }

// LintWith is Lint with the interference profiles a running scheduler
// knows (nil: only the built-in ones are known, and another named profile
// is a warning, not an error).
func LintWith(job *api.Job, sharesPerGPU int, profiles *interference.Model) []Finding {
	if sharesPerGPU <= 0 {
		sharesPerGPU = devicefn.DefaultSharesPerGPU
	}
	var out []Finding
	add := func(sev Severity, group, format string, a ...any) {
		out = append(out, Finding{Severity: sev, Group: group, Message: fmt.Sprintf(format, a...)})
	}
	gated := pin.Gated(job)
	if slices.ContainsFunc(job.Constraints, pin.IsLegacyGate) {
		add(Warning, "", "%s", LegacyGate)
	}
	out = append(out, lintMeta(job.Meta, "")...)
	any := false
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		if slices.ContainsFunc(tg.Constraints, pin.IsLegacyGate) {
			add(Warning, name, "%s", LegacyGate)
		}
		out = append(out, lintMeta(tg.Meta, name)...)
		var devs []*api.RequestedDevice
		for _, t := range tg.Tasks {
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				if d.Name == pin.DeviceName || strings.HasPrefix(d.Name, pin.DeviceName+"/") {
					devs = append(devs, d)
				} else if f, ok := lintDeviceName(d.Name, name); ok {
					out = append(out, f)
				}
			}
		}
		// findings about the device block name its line
		addDev := func(sev Severity, format string, a ...interface{}) {
			out = append(out, Finding{Severity: sev, Group: name, Device: devs[0].Name, Message: fmt.Sprintf(format, a...)})
		}
		if len(devs) == 0 {
			if slices.Contains(gated, name) {
				add(Error, name, "carries the gpushare gate but asks for no %q device: it would wait forever; remove the gate or add a device block", pin.DeviceName)
			}
			continue
		}
		any = true
		if len(devs) > 1 {
			add(Error, name, "%d tasks ask for %q; gpushare places one GPU request per group: put the GPU work in one task", len(devs), pin.DeviceName)
			continue
		}
		count := 1
		if devs[0].Count != nil {
			count = int(*devs[0].Count)
		}
		switch {
		case count == 0:
			addDev(Error, "device count is 0: ask for at least 1 share")
		case count > sharesPerGPU && count%sharesPerGPU != 0:
			addDev(Error, "count = %d shares is more than one GPU (%d shares) but not whole GPUs, so it can never be placed: "+
				"a request of more than shares_per_gpu shares must be a multiple of it (whole GPUs; a fraction is never split across GPUs): ask for %d or %d",
				count, sharesPerGPU, count/sharesPerGPU*sharesPerGPU, (count/sharesPerGPU+1)*sharesPerGPU)
		}
		for _, c := range devs[0].Constraints {
			if c.LTarget == pin.DeviceAttribute {
				addDev(Warning, "has a ${device.ids} constraint: pins are written by the gpushare scheduler; a hand-written one is replaced when it places the group")
			}
		}
		if job.IsParameterized() && slices.Contains(gated, name) {
			add(Warning, name, "%s", DispatchedGated)
		}
		out = append(out, lintRuntimeEnv(job, tg)...)
		ts := lintTimeslice(job, tg, count, sharesPerGPU)
		out = append(out, ts...)
		if !slices.Contains(gated, name) && !pin.Pinned(job, name) {
			add(Error, name, "%s", NoGate)
		}
		if _, err := pin.Request(job, name, profiles); err != nil && !strings.Contains(err.Error(), "no task asks") &&
			!(HasErrors(ts) && strings.Contains(err.Error(), pin.MetaTimeslice)) { // said above, with its line
			if errors.Is(err, pin.ErrUnknownProfile) && profiles == nil {
				// the scheduler's configuration may define it: say so, not an error
				add(Warning, name, "%v; the scheduler must define it in a profile block (pass -scheduler to check against a running one)", err)
			} else {
				add(Error, name, "%v", err)
			}
		}
	}
	if !any {
		add(Warning, "", "asks for no %q device; gpushare has nothing to do with this job", pin.DeviceName)
	}
	return out
}

// NoGate is what is wrong with a group that asks for gpushare devices
// without the gate: registered as it is (nomad job run), Nomad places it
// by itself before gpushare can, taking shares in arbitrary order; the
// scheduler adopts it afterwards, at the cost of a failed allocation when
// Nomad spread a fraction over GPUs.
const NoGate = "asks for nvidia/gpushare devices but has no gpushare gate: registered as it is (`nomad job run`), Nomad places the group by itself before gpushare can, " +
	"taking shares in arbitrary order, so a fraction spread over GPUs fails (Reserve refuses it) until the scheduler adopts the group. " +
	"Add the gate to the group (constraint { attribute = \"${meta.gpushare_gate}\" value = \"pending\" }), or submit the file with `gpushare job run`, " +
	"which adds it (`gpushare job lint -for-job-run` checks the file as `gpushare job run` registers it)"

// DispatchedGated is what to know of a gated parameterized job: Nomad
// refuses every registration of a dispatched job, so gpushare pins the
// parent to a pool of GPUs and Nomad places each child inside it; a child
// dispatched before the parent is pinned carries the gate for good.
const DispatchedGated = "a parameterized job: gpushare pins it to a pool of GPUs (one child's worth on each node its rules allow) and Nomad places each dispatched child inside it; dispatch children once `gpushare job status` shows the job pinned (state template, with a placement): a child dispatched while the gate is still on waits for good (Nomad refuses every registration of a dispatched job)"

// LegacyGate is what to know of the gate as written before: it holds the
// group still, but on a unique attribute, which Nomad re-evaluates on
// every freed allocation (pin.GateAttribute says why).
const LegacyGate = "the gate ${node.unique.id} = gpushare:pending still works, but Nomad evaluates the waiting group again each time an allocation ends anywhere in the cluster, and under churn those evaluations delay every pin: write the gate as constraint { attribute = \"${meta.gpushare_gate}\" value = \"pending\" } (`gpushare job run` rewrites it so)"

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Error })
}

// lintRuntimeEnv warns about MPS variables a group's GPU task sets itself:
// the scheduler does not overwrite a CUDA_MPS_CLIENT_PRIORITY the task
// sets (an opportunistic group then runs at the priority the user chose),
// and a CUDA_MPS_ACTIVE_THREAD_PERCENTAGE in the env block has no effect
// (the plugin's device env overrides it).
func lintRuntimeEnv(job *api.Job, tg *api.TaskGroup) []Finding {
	var out []Finding
	opportunistic := pin.Meta(job, tg)[pin.MetaClass] == string(placement.ClassOpportunistic)
	for _, t := range tg.Tasks {
		if t.Resources == nil || !slices.ContainsFunc(t.Resources.Devices, func(d *api.RequestedDevice) bool {
			return d.Name == pin.DeviceName || strings.HasPrefix(d.Name, pin.DeviceName+"/")
		}) {
			continue
		}
		if v, ok := t.Env[pin.EnvMPSClientPriority]; ok && opportunistic {
			out = append(out, Finding{Severity: Warning, Group: *tg.Name, Message: fmt.Sprintf("task %q sets %s=%s for an opportunistic group: the scheduler keeps your value and writes none "+
				"(on MPS GPUs it writes 1, below normal, so that production jobs on the same GPU keep priority); remove it unless you mean it", t.Name, pin.EnvMPSClientPriority, v)})
		}
		if v, ok := t.Env[pin.EnvMPSThreads]; ok {
			out = append(out, Finding{Severity: Warning, Group: *tg.Name, Message: fmt.Sprintf("task %q sets %s=%s in its env block, which has no effect: the gpushare plugin sets it for the fraction "+
				"and Nomad lets a device's env override the task's (the scheduler's opportunistic { active_thread_scale } lowers it for opportunistic groups)", t.Name, pin.EnvMPSThreads, v)})
		}
	}
	return out
}
