package service

import (
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/pin"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The service pins an opportunistic group on MPS GPUs with the below-normal
// client priority, a production one without, and writes nothing on
// time-sliced GPUs.
func TestPinWritesOpportunisticPriority(t *testing.T) {
	for _, sharing := range []string{devicefn.SharingMPS, devicefn.SharingTimeslice} {
		t.Run(sharing, func(t *testing.T) {
			node := dgx1(t)
			node.NodeResources.Devices[0].Attributes[devicefn.AttrSharing] = &api.Attribute{StringVal: ptr(sharing)}
			f := &fakeNomad{nodes: []*api.Node{node}, jobs: map[string]*api.Job{}}
			opp, prod := gated("scavenger", 25), gated("serving", 25)
			opp.TaskGroups[0].Meta[pin.MetaClass] = "opportunistic"
			prod.TaskGroups[0].Meta[pin.MetaClass] = "production"
			f.put(opp)
			f.put(prod)
			s := newTestService(t, f)
			s.loop.reconcile(t.Context())

			must.SliceEmpty(t, pin.Gated(f.jobs["scavenger"]))
			must.SliceEmpty(t, pin.Gated(f.jobs["serving"]))
			must.MapEmpty(t, f.jobs["serving"].TaskGroups[0].Tasks[0].Env)
			got := f.jobs["scavenger"].TaskGroups[0].Tasks[0].Env
			if sharing == devicefn.SharingMPS {
				must.Eq(t, map[string]string{pin.EnvMPSClientPriority: "1"}, got)
			} else {
				must.MapEmpty(t, got)
			}
		})
	}
}
