package pin

import (
	"maps"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Writable returns a copy of job that PinWith, Repeat, Unpin and CarryEnv,
// and a caller setting a group's meta, may change without changing job
// (not AddGate, which rewrites a legacy gate in place). What they write is
// copied: the job and its constraints; each group, its constraints and
// meta; each task, its environment and templates; each task's resources
// and their device requests with their constraints. Everything else (a
// task's config, services, volumes, ...) is shared with job, so neither
// may change it in place.
//
// A pass pins thousands of groups: a deep copy of each job was most of a
// pin's work (BenchmarkWritable), for parts no pin touches.
func Writable(job *api.Job) *api.Job {
	if job == nil {
		return nil
	}
	c := *job
	c.Constraints = slices.Clone(job.Constraints)
	c.TaskGroups = make([]*api.TaskGroup, len(job.TaskGroups))
	for i, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		g := *tg
		g.Constraints = slices.Clone(tg.Constraints)
		g.Meta = maps.Clone(tg.Meta)
		g.Tasks = make([]*api.Task, len(tg.Tasks))
		for k, t := range tg.Tasks {
			if t == nil {
				continue
			}
			w := *t
			w.Env = maps.Clone(t.Env)
			w.Templates = slices.Clone(t.Templates)
			if t.Resources != nil {
				r := *t.Resources
				r.Devices = make([]*api.RequestedDevice, len(t.Resources.Devices))
				for d, dev := range t.Resources.Devices {
					if dev == nil {
						continue
					}
					dc := *dev
					dc.Constraints = slices.Clone(dev.Constraints)
					r.Devices[d] = &dc
				}
				if t.Resources.Devices == nil {
					r.Devices = nil
				}
				w.Resources = &r
			}
			g.Tasks[k] = &w
		}
		if tg.Tasks == nil {
			g.Tasks = nil
		}
		c.TaskGroups[i] = &g
	}
	if job.TaskGroups == nil {
		c.TaskGroups = nil
	}
	return &c
}
