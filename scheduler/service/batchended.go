package service

import (
	"fmt"
	"slices"

	"github.com/gpushare/gpushare/scheduler/decide"
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// A batch job's every new version runs again what already ended: Nomad's
// reconciler ignores the terminal allocations of older versions of a
// batch job (its filterOldTerminalAllocs), so the names that completed, or
// failed with no reschedule left, are placed again. Nomad alone makes a
// new version only when the user changes the job. gpushare makes one in
// two cases the user did not: the pin written for the same file
// registered again (the file, gated, is itself a version), and a re-pin
// of a group whose pinned capacity is gone. Such a version is written
// with the count lowered by the names that ended, so that Nomad places
// what it would have placed without it: the allocations still running
// are kept (untainted: they are as many as the lowered count, and Nomad
// stops none of a batch group for its name), and nothing that ended runs
// again. The job's count in Nomad then says how many are left to run;
// the file's count comes back with the next registration of the file.

// endedAgain is how many allocation names of group key that ended the
// version about to be written of job (the version read, before its pin)
// would run again, where Nomad alone would make no new version: for a
// group at the gate, only when it is the file of its running pinned
// version registered again unchanged (its prior's spec and request, as
// ranUnchanged tells it), counting what ended in any version; for a
// group gpushare pins again on its own (not gated), what ended in the
// current version (Nomad ignores older ones already). 0 when nothing
// would, or when every name ended (no allocation left to run: such a
// group is not pinned again). The caller holds the model's lock.
func (p *pinner) endedAgain(job *api.Job, key decide.Key) int {
	tg := pin.Group(job, key.Group)
	if tg == nil {
		return 0
	}
	all := p.c.state.AllAllocs(key.Namespace, key.Job, key.Group)
	var n int
	if slices.Contains(pin.Gated(job), key.Group) {
		prior, ok := p.c.state.Prior(key)
		if !ok || prior.Record == nil || prior.Spec == "" || prior.Spec != pin.Spec(job, key.Group) ||
			prior.Record.Request != pin.Digest(job, key.Group, p.policy) {
			return 0 // a changed file: a new version Nomad alone makes too
		}
		n = model.EndedNames(all, job, key.Group, false)
	} else {
		n = model.EndedNames(all, job, key.Group, true)
	}
	if n >= pin.Count(tg) {
		return 0
	}
	return n
}

// lowerEnded writes the count of group's version c without the n names
// that ended (endedAgain), and says so in rec's reason.
func lowerEnded(c *api.Job, group string, n int, rec *pin.Record) {
	tg := pin.Group(c, group)
	if n <= 0 || tg == nil {
		return
	}
	count := pin.Count(tg) - n
	tg.Count = &count
	why := fmt.Sprintf("count %d in Nomad: %d allocation(s) of its %d already ended, and a new version of a batch job would run them again", count, n, count+n)
	if rec.Reason == "" {
		rec.Reason = why
	} else {
		rec.Reason += "; " + why
	}
}
