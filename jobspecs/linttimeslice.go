package jobspecs

import (
	"fmt"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// lintTimeslice checks a group's gpushare.timeslice (job or group meta,
// the group's wins): "true" or "false", and, time-sliced, fewer shares
// than a whole GPU per allocation: a time-sliced group's shares are its
// GPU memory, so one that holds a whole GPU's memory takes turns with no
// one. count is the group's device count (shares per allocation).
func lintTimeslice(job *api.Job, tg *api.TaskGroup, count, sharesPerGPU int) []Finding {
	v, ok := pin.Meta(job, tg)[pin.MetaTimeslice]
	if !ok {
		return nil
	}
	switch {
	case v != "true" && v != "false":
		return []Finding{{Severity: Error, Group: *tg.Name, Meta: pin.MetaTimeslice, Message: fmt.Sprintf(
			"%s = %q: want \"true\" (time-sliced: its shares count its GPU memory, and its compute is the whole GPU in turns with the other time-sliced jobs of its GPU) or \"false\"",
			pin.MetaTimeslice, v)}}
	case v == "true" && count >= sharesPerGPU:
		return []Finding{{Severity: Warning, Group: *tg.Name, Meta: pin.MetaTimeslice, Message: fmt.Sprintf(
			"time-sliced, but count = %d shares is a whole GPU or more per allocation: a time-sliced group's shares are its GPU memory, so it leaves no memory for another job to take turns with, "+
				"and there is nothing to share; ask for the shares of the memory it needs (%d shares is the whole GPU's), or drop %s",
			count, sharesPerGPU, pin.MetaTimeslice)}}
	}
	return nil
}
