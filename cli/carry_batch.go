package cli

import (
	"github.com/gpushare/gpushare/scheduler/model"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
)

// carryEnded keeps the running version's count for a batch group whose
// pin is carried over (the same file registered again) when the scheduler
// wrote that version with its count lowered by the allocation names that
// had ended (scheduler/service/batchended.go): the registration is then
// that version, unchanged, and Nomad makes no new one, as for any
// unchanged file. With the file's count it would be a new version, and
// Nomad runs again every name of a batch job that ended in an older
// version. A count the names that ended do not explain (the file scaled)
// is the file's.
func carryEnded(client *api.Client, old, job *api.Job, group string) {
	tg, was := pin.Group(job, group), pin.Group(old, group)
	if tg == nil || was == nil || job.Type == nil || *job.Type != api.JobTypeBatch {
		return
	}
	gap := pin.Count(tg) - pin.Count(was)
	if gap <= 0 {
		return
	}
	q := &api.QueryOptions{Namespace: namespaceOf(old)}
	stubs, _, err := client.Jobs().Allocations(*old.ID, true, q)
	if err != nil {
		return
	}
	var all []*api.Allocation
	for _, st := range stubs {
		if st.TaskGroup != group {
			continue
		}
		if st.ClientStatus != api.AllocClientStatusComplete && st.ClientStatus != api.AllocClientStatusFailed {
			all = append(all, &api.Allocation{ID: st.ID, Name: st.Name, TaskGroup: st.TaskGroup, ClientStatus: st.ClientStatus,
				DesiredStatus: st.DesiredStatus, CreateIndex: st.CreateIndex})
			continue
		}
		a, _, err := client.Allocations().Info(st.ID, q) // what FailedForGood reads
		if err != nil {
			return
		}
		all = append(all, a)
	}
	if model.EndedNames(all, old, group, false) >= gap {
		c := pin.Count(was)
		tg.Count = &c
	}
}

func namespaceOf(job *api.Job) string {
	if job.Namespace == nil {
		return ""
	}
	return *job.Namespace
}
