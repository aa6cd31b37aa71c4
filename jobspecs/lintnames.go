package jobspecs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// metaElastic is the scheduler's elastic opt-in (service.MetaElastic; the
// service is not imported here: cli's tests check the two agree).
const metaElastic = "gpushare.elastic"

// KnownMeta lists the gpushare.* meta keys a jobspec may carry, sorted:
// those the scheduler reads (pin's meta constants, service.MetaElastic)
// and those a pin writes, which a pinned jobspec registered again carries.
func KnownMeta() []string {
	keys := []string{
		pin.MetaVC, pin.MetaClass, pin.MetaProfile, pin.MetaSMUtil, pin.MetaMemBW, pin.MetaMaxSlowdown,
		pin.MetaExpected, pin.MetaReplicas, pin.MetaTimeslice, metaElastic,
		pin.MetaPlacement, pin.MetaSignature,
	}
	slices.Sort(keys)
	return keys
}

// lintMeta refuses gpushare.* meta keys gpushare does not read: a
// misspelt key is silently ignored by the scheduler, so the job runs
// without what the user asked for. group is "" for the job's meta.
func lintMeta(meta map[string]string, group string) []Finding {
	known := KnownMeta()
	var out []Finding
	for _, k := range sortedKeys(meta) {
		if !strings.HasPrefix(k, "gpushare.") || slices.Contains(known, k) {
			continue
		}
		msg := fmt.Sprintf("unknown meta key %q: gpushare ignores it", k)
		if near := closest(k, known, "gpushare.", 0); near != "" {
			msg += fmt.Sprintf("; did you mean %q?", near)
		} else {
			msg += "; it reads " + strings.Join(known, ", ")
		}
		out = append(out, Finding{Severity: Error, Group: group, Meta: k, Message: msg})
	}
	return out
}

// lintDeviceName says when a task's device name looks like a misspelt
// gpushare device ("nvidia/gpushar", "nvida/gpushare/H100", "gpushare"):
// the scheduler reads only "nvidia/gpushare[/<model>]", so such a group is
// Nomad's alone. ok is false for any other device (nvidia/gpu included).
func lintDeviceName(name, group string) (Finding, bool) {
	ours := []string{pin.DeviceName, devicefn.Vendor + "/" + devicefn.MIGDeviceType}
	head, model := name, ""
	if parts := strings.SplitN(name, "/", 3); len(parts) == 3 {
		head, model = parts[0]+"/"+parts[1], "/"+parts[2]
	}
	if slices.Contains(ours, head) {
		return Finding{}, false
	}
	near := closest(head, ours, "", 2) // not nvidia/gpu, 5 edits away
	if near == "" && (head == devicefn.DeviceType || head == devicefn.MIGDeviceType) {
		near = devicefn.Vendor + "/" + head // Nomad matches a type of any vendor; gpushare reads only nvidia's
	}
	if near == "" {
		return Finding{}, false
	}
	return Finding{Severity: Error, Group: group, Device: name, Message: fmt.Sprintf(
		"device %q is no gpushare device, so gpushare does not place the group; did you mean %q?", name, near+model)}, true
}

// CheckModels refuses a device name whose GPU model
// ("nvidia/gpushare/<model>") no node of the cluster has, with the model
// of the cluster nearest it; nodes are the cluster's (the scheduler's GPU
// map), nil when unknown: then nothing is checked.
func CheckModels(job *api.Job, nodes []NodeGPUs) []Finding {
	var models []string
	for _, n := range nodes {
		if n.Model != "" && !slices.Contains(models, n.Model) {
			models = append(models, n.Model)
		}
	}
	if len(models) == 0 {
		return nil
	}
	slices.Sort(models)
	var out []Finding
	for _, tg := range job.TaskGroups {
		for _, t := range tg.Tasks {
			if t.Resources == nil {
				continue
			}
			for _, d := range t.Resources.Devices {
				model, ok := strings.CutPrefix(d.Name, pin.DeviceName+"/")
				if !ok || slices.Contains(models, model) {
					continue
				}
				msg := fmt.Sprintf("device %q asks for GPUs of model %q, and no node of the cluster has them, so it can never be placed", d.Name, model)
				if near := closest(model, models, "", 0); near != "" {
					msg += fmt.Sprintf("; did you mean %q?", pin.DeviceName+"/"+near)
				} else {
					msg += "; the cluster has " + strings.Join(models, ", ")
				}
				out = append(out, Finding{Severity: Error, Group: *tg.Name, Device: d.Name, Message: msg})
			}
		}
	}
	return out
}

// closest is the candidate nearest s by edit distance (after prefix),
// when it is near enough to be a typo of it: at most limit edits, or when
// limit is 0 at most 2 or a third of the candidate's length; "" otherwise.
func closest(s string, candidates []string, prefix string, limit int) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := distance(strings.TrimPrefix(s, prefix), strings.TrimPrefix(c, prefix))
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	if limit == 0 {
		limit = max(2, len(strings.TrimPrefix(best, prefix))/3)
	}
	if best == "" || bestD > limit {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
