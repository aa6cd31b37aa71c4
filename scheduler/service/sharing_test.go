package service

import (
	"testing"

	"github.com/gpushare/gpushare/scheduler/config"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// With idle_gpu_first, the service weighs sharing against waiting by
// SJF-BSBF's rule in every pass, as the simulator's gpushare policy does
// (decide's TestSharingMustBeatWaiting), not only in passes where a
// multi-GPU group waits for a reservation: a job at a predicted 0.485 of
// alone beside a hog waits for the GPU that frees in a minute; when that
// GPU is busy for 10 h, it shares. Reservations on or off changes
// nothing. Before, the service computed the running jobs' expected ends
// only for reservations, the rule found no end to weigh, and the job was
// paired at once.
func TestSharingMustBeatWaitingInEveryPass(t *testing.T) {
	const hog = "ResNet-50 (batch size 16)"
	scenario := func(soon string) *fakeNomad {
		f := &fakeNomad{nodes: []*api.Node{dgx1(t)}, jobs: map[string]*api.Job{}}
		for g := range 7 { // half of GPUs 0-6, for 10 h more
			id := "hog-" + string(rune('0'+g))
			running(t, f, id, []int{g}, 0, "10h")
			f.jobs[id].Meta[pin.MetaProfile] = hog
			a := f.allocs[len(f.allocs)-1].AllocatedResources.Tasks["t"].Devices[0]
			a.DeviceIDs = a.DeviceIDs[:50]
		}
		running(t, f, "whole", []int{7}, 0, soon) // GPU 7, whole
		j := gated("new", 50)
		j.Meta[pin.MetaProfile], j.Meta[pin.MetaExpected] = hog, "1h"
		f.put(j)
		return f
	}
	for _, reservations := range []bool{true, false} {
		edit := func(c *config.Config) { c.IdleGPUFirst, c.Reservations = true, ptr(reservations) }
		// the fake clock reads 10,000 s; the jobs started at 1,000 s
		f := scenario("2h31m") // GPU 7 frees at 10,060 s
		s := withConfig(t, f, edit)
		_, ok := pin.ParseRecord(f.jobs["new"], "g")
		must.False(t, ok, must.Sprintf("reservations %v: paired though waiting a minute beats sharing", reservations))
		must.StrContains(t, s.loop.answers.pending[key("new")], "than waiting about 1m0s")

		f = scenario("12h")
		withConfig(t, f, edit)
		_, ok = pin.ParseRecord(f.jobs["new"], "g")
		must.True(t, ok, must.Sprintf("reservations %v: every GPU is busy for hours: sharing wins", reservations))
	}
}
