package service

import (
	"slices"
	"testing"

	"github.com/gpushare/gpushare/devicefn"
	"github.com/gpushare/gpushare/scheduler/nomadattr"
	"github.com/gpushare/gpushare/scheduler/placement"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// A pin reads its GPUs' sharing mode from the node's device attributes,
// decoded once per node object: the same node gives the same decoded
// groups, and an update of the node (a new object) is decoded again.
func TestPinsDecodeANodesDevicesOncePerVersion(t *testing.T) {
	node := dgx1(t)
	f := &fakeNomad{nodes: []*api.Node{node}, jobs: map[string]*api.Job{}}
	s := newTestService(t, f)
	d := &placement.Decision{Placements: []placement.Placement{{Node: node.ID}}}
	s.mu.Lock()
	model := s.state.Nodes[node.ID]
	uuid := s.loop.pins.runtimes.deviceGroups(model)[0].GPUs[0].UUID
	s.mu.Unlock()
	d.Placements[0].GPUs = []string{uuid}
	must.Eq(t, devicefn.SharingMPS, s.loop.pins.runtimes.of(d).Sharing)
	s.mu.Lock()
	first := s.loop.pins.runtimes.deviceGroups(model)[0]
	must.True(t, first == s.loop.pins.runtimes.deviceGroups(model)[0], must.Sprint("the same node object was decoded again"))
	s.mu.Unlock()

	// the node's GPUs now time-sliced: a new object, decoded again
	c := *model
	res := *model.NodeResources
	dev := *model.NodeResources.Devices[0]
	attrs := nomadattr.FromAPI(dev.Attributes)
	attrs[devicefn.AttrSharing] = devicefn.Attr{String: ptr(devicefn.SharingTimeslice)}
	dev.Attributes = nomadattr.ToAPI(attrs)
	res.Devices = []*api.NodeDeviceResource{&dev}
	c.NodeResources, c.ModifyIndex = &res, model.ModifyIndex+1
	s.mu.Lock()
	s.state.PutNode(&c)
	s.mu.Unlock()
	must.Eq(t, devicefn.SharingTimeslice, s.loop.pins.runtimes.of(d).Sharing)
}

// A node whose plugin offers one device group per GPU (device_groups =
// "gpu"): each group is one GPU's, with the same sharing attributes, so a
// pin across two of them still writes the GPUs' sharing mode and shares
// per GPU; GPUs of different modes write none.
func TestPinsReadTheSharingModeOfPerGPUGroups(t *testing.T) {
	node := dgx1(t)
	g, err := nomadattr.DecodeGroup(node.NodeResources.Devices[0])
	must.NoError(t, err)
	node.NodeResources.Devices = nomadattr.GPUDevices(g)
	must.SliceLen(t, 8, node.NodeResources.Devices)
	f := &fakeNomad{nodes: []*api.Node{node}, jobs: map[string]*api.Job{}}
	s := newTestService(t, f)
	d := &placement.Decision{Placements: []placement.Placement{{Node: node.ID, GPUs: []string{g.GPUs[0].UUID, g.GPUs[3].UUID}}}}
	rt := s.loop.pins.runtimes.of(d)
	must.Eq(t, devicefn.SharingMPS, rt.Sharing)
	must.Eq(t, 100, rt.SharesPerGPU)

	// GPU 3 now time-sliced: the two GPUs differ, so no mode is written
	c := *s.state.Nodes[node.ID]
	res := *c.NodeResources
	res.Devices = slices.Clone(res.Devices)
	dev := *res.Devices[3]
	attrs := nomadattr.FromAPI(dev.Attributes)
	attrs[devicefn.AttrSharing] = devicefn.Attr{String: ptr(devicefn.SharingTimeslice)}
	dev.Attributes = nomadattr.ToAPI(attrs)
	res.Devices[3] = &dev
	c.NodeResources, c.ModifyIndex = &res, c.ModifyIndex+1
	s.mu.Lock()
	s.state.PutNode(&c)
	s.mu.Unlock()
	must.Eq(t, "", s.loop.pins.runtimes.of(d).Sharing)
}
