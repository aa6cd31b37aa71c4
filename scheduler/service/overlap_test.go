package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// periodicChild is a gated child of parent launched at unix seconds at,
// as Nomad's dispatcher names and registers it (ParentID set).
func periodicChild(parent string, at int64) *api.Job {
	j := gated(fmt.Sprintf("%s/periodic-%d", parent, at), 25)
	j.ParentID = ptr(parent)
	j.Type = ptr("batch")
	return j
}

// A periodic parent with prohibit_overlap: its earlier child, pinned by
// gpushare (registered again, so Nomad no longer sees its ParentID),
// still runs when Nomad launches the next one on schedule. That one is
// never pinned and is stopped, as Nomad alone would not have launched
// it; a child forced by hand off the schedule is placed, as Nomad runs
// it whatever runs; once the earlier child is dead, the next one on
// schedule is placed.
func TestAPeriodicChildNomadWouldNotHaveLaunchedIsStopped(t *testing.T) {
	f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
	parent := gated("nightly", 25)
	parent.Type = ptr("batch")
	parent.Periodic = &api.PeriodicConfig{Enabled: ptr(true), SpecType: ptr(api.PeriodicSpecCron), Spec: ptr("*/5 * * * *"), ProhibitOverlap: ptr(true)}
	f.put(parent)
	base := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC).Unix() // on the schedule
	first := periodicChild("nightly", base)
	first.ParentID = nil // pinned by gpushare: the registration dropped it
	first.Status = ptr("running")
	f.put(first)
	onTime := periodicChild("nightly", base+300)
	forced := periodicChild("nightly", base+417)
	f.put(onTime)
	f.put(forced)
	s := loadedService(t, f)
	s.loop.reconcile(t.Context())

	_, pinned := pin.ParseRecord(f.jobs[*onTime.ID], "g")
	must.False(t, pinned, must.Sprint("a child Nomad would not have launched is not placed"))
	must.Eq(t, []string{*onTime.ID}, f.holdsStopped, must.Sprint("and it is stopped"))
	must.True(t, *f.jobs[*onTime.ID].Stop)
	_, pinned = pin.ParseRecord(f.jobs[*forced.ID], "g")
	must.True(t, pinned, must.Sprint("a forced child runs beside, as under Nomad alone"))

	// the earlier child ended: the next launch on schedule is placed
	f.status(*first.ID, "dead")
	f.status(*forced.ID, "dead")
	f.status(*onTime.ID, "dead") // stopped, with no allocation: Nomad says dead
	next := periodicChild("nightly", base+600)
	f.put(next)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, pinned = pin.ParseRecord(f.jobs[*next.ID], "g")
	must.True(t, pinned, must.Sprint(s.loop.answers.pending[key(*next.ID)]))
	must.Eq(t, []string{*onTime.ID}, f.holdsStopped)

	// a parent that allows overlap: its children run side by side
	f.mu.Lock()
	f.jobs["nightly"].Periodic.ProhibitOverlap = ptr(false)
	f.index++
	f.jobs["nightly"].ModifyIndex = ptr(f.index)
	f.mu.Unlock()
	f.status(*next.ID, "running")
	beside := periodicChild("nightly", base+900)
	f.put(beside)
	must.NoError(t, s.watcher.resync(t.Context()))
	s.loop.reconcile(t.Context())
	_, pinned = pin.ParseRecord(f.jobs[*beside.ID], "g")
	must.True(t, pinned)
}

// status sets a job's status as Nomad reports it (a new modify index).
func (f *fakeNomad) status(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	f.jobs[id].Status, f.jobs[id].ModifyIndex = ptr(status), ptr(f.index)
}
