package pin

import (
	"maps"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Writable returns a copy of job that PinWith, Repeat and Unpin, and a
// caller setting a group's meta, may change without changing job
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
	c.TaskGroups = copyEach(job.TaskGroups, func(tg api.TaskGroup) api.TaskGroup {
		tg.Constraints = slices.Clone(tg.Constraints)
		tg.Meta = maps.Clone(tg.Meta)
		tg.Tasks = copyEach(tg.Tasks, writableTask)
		return tg
	})
	return &c
}

func writableTask(t api.Task) api.Task {
	t.Env = maps.Clone(t.Env)
	t.Templates = slices.Clone(t.Templates)
	if t.Resources != nil {
		r := *t.Resources
		r.Devices = copyEach(r.Devices, func(d api.RequestedDevice) api.RequestedDevice {
			d.Constraints = slices.Clone(d.Constraints)
			return d
		})
		t.Resources = &r
	}
	return t
}

// copyEach returns a new list of copies of list's elements, each passed
// through fix (nil stays nil, a nil element too).
func copyEach[T any](list []*T, fix func(T) T) []*T {
	if list == nil {
		return nil
	}
	out := make([]*T, len(list))
	for i, p := range list {
		if p != nil {
			c := fix(*p)
			out[i] = &c
		}
	}
	return out
}
