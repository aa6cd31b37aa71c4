package model

import (
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// EndedNames counts the allocation names of a batch job's group whose
// last allocation ended as Nomad counts one of the count: completed, or failed with no reschedule left
// (FailedForGood). With current, only those whose last allocation runs the
// job's current version (Current): Nomad's reconciler ignores the terminal
// allocations of older versions of a batch job, so a new version of it
// runs again every name that ended. A name whose last allocation still
// runs, or failed and is rescheduled, is not counted. Every name the group
// ran counts, also past its count (a version gpushare wrote with its count
// lowered runs names past it). 0 for any other job (a service, a system or
// sysbatch job, a template).
func EndedNames(all []*api.Allocation, job *api.Job, group string, current bool) int {
	tg := pin.Group(job, group)
	if tg == nil || job.Type == nil || *job.Type != api.JobTypeBatch || job.ParameterizedJob != nil || job.Periodic != nil {
		return 0
	}
	last := map[int]*api.Allocation{}
	for _, a := range all {
		if a == nil || a.TaskGroup != group {
			continue
		}
		i, ok := NameIndex(a.Name)
		if !ok {
			continue
		}
		if l := last[i]; l == nil || a.CreateIndex > l.CreateIndex {
			last[i] = a
		}
	}
	n := 0
	for _, a := range last {
		if (a.ClientStatus == api.AllocClientStatusComplete || FailedForGood(a, job)) && (!current || Current(a, job)) {
			n++
		}
	}
	return n
}

// NameIndex is the index Nomad gives an allocation in its name
// ("<job>.<group>[<index>]").
func NameIndex(name string) (int, bool) {
	open := strings.LastIndexByte(name, '[')
	if open < 0 || !strings.HasSuffix(name, "]") {
		return 0, false
	}
	i, err := strconv.Atoi(name[open+1 : len(name)-1])
	return i, err == nil && i >= 0
}
