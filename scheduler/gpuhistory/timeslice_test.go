package gpuhistory

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// The plugin's time-slice stats are read per share; an allocation's are
// those of its share that waited most (a task of two GPUs is a member of
// each rotation); shares without them give none. The store keeps the last
// round's per allocation, found by ID.
func TestTimesliceFromShares(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	share := func(q, s, n int64) *api.DeviceStats {
		return &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
			"GPU utilization":      {IntNumeratorVal: i64(50), IntDenominatorVal: i64(100)},
			"Time-slice quantum":   {IntNumeratorVal: i64(q)},
			"Time-slice suspended": {IntNumeratorVal: i64(s)},
			"Time-slice turns":     {IntNumeratorVal: i64(n)},
		}}}
	}
	r := NewRound()
	r.Add([]*api.DeviceGroupStats{{Vendor: "nvidia", Type: "gpushare", InstanceStats: map[string]*api.DeviceStats{
		"GPU-a:0": share(2000, 1500, 3), "GPU-b:0": share(2000, 4000, 5),
		"GPU-c:0": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"GPU utilization": {IntNumeratorVal: i64(50)}}}},
	}}})
	ts, ok := r.Timeslice([]string{"GPU-a:0", "GPU-b:0"})
	must.True(t, ok)
	must.Eq(t, Timeslice{GPU: "GPU-b", Quantum: 2 * time.Second, Suspended: 4 * time.Second, Turns: 5}, ts)
	_, ok = r.Timeslice([]string{"GPU-c:0", "GPU-d:0"})
	must.False(t, ok)

	s := New(time.Hour, time.Minute)
	s.SetTimeslices([]AllocTimeslice{{Alloc: "b", Timeslice: ts}, {Alloc: "a"}})
	got, ok := s.TimesliceOf("b")
	must.True(t, ok)
	must.Eq(t, ts, got.Timeslice)
	_, ok = s.TimesliceOf("c")
	must.False(t, ok)
	must.Eq(t, []string{"a", "b"}, []string{s.Timeslices()[0].Alloc, s.Timeslices()[1].Alloc})
}
