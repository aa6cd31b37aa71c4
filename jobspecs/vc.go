package jobspecs

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// VC is a virtual cluster the scheduler offers (its /v1/vcs): jobs may
// name it in gpushare.vc when their namespace is one it admits (none
// listed: every namespace).
type VC struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// CheckVC reports the groups whose gpushare.vc names no virtual cluster of
// vcs, or one that does not admit the job's namespace: the scheduler
// leaves such groups waiting.
func CheckVC(job *api.Job, vcs []VC) []Finding {
	var out []Finding
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	for _, tg := range job.TaskGroups {
		vc := pin.Meta(job, tg)[pin.MetaVC] // read as is: a request with another error still names it
		if vc == "" {
			continue
		}
		i := slices.IndexFunc(vcs, func(v VC) bool { return v.Name == vc })
		switch {
		case i < 0:
			names := make([]string, 0, len(vcs))
			for _, v := range vcs {
				names = append(names, v.Name)
			}
			if len(names) == 0 {
				names = []string{"none"}
			}
			out = append(out, Finding{Severity: Error, Group: *tg.Name, Meta: pin.MetaVC, Message: pin.MetaVC + " = " + quote(vc) +
				" names no virtual cluster of the scheduler (it has: " + strings.Join(names, ", ") + "): the group would wait forever"})
		case len(vcs[i].Namespaces) > 0 && !slices.Contains(vcs[i].Namespaces, ns):
			out = append(out, Finding{Severity: Error, Group: *tg.Name, Meta: pin.MetaVC, Message: "virtual cluster " + quote(vc) + " admits only namespaces " +
				strings.Join(vcs[i].Namespaces, ", ") + "; this job is in " + ns})
		}
	}
	return out
}

func quote(s string) string { return `"` + s + `"` }
