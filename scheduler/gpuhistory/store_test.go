package gpuhistory

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/scheduler/gpumap"
	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// An hour at a 30s interval is 121 points per series, whatever is
// recorded: the oldest go first, and the history read at now holds only
// the points of the hour before it.
func TestStoreKeepsAnHourBounded(t *testing.T) {
	s := New(time.Hour, 30*time.Second)
	must.EqOp(t, 121, s.Size())
	t0 := time.Unix(1_000_000, 0)
	at := t0
	for i := range 300 {
		s.Record(at, map[string]gpumap.Stats{"GPU-a": {UtilizationPct: float64(i % 100), PowerW: 100}},
			map[JobKey]float64{{"default", "train"}: float64(i)})
		at = at.Add(30 * time.Second)
	}
	last := at.Add(-30 * time.Second)
	pts := s.GPU("GPU-a", last)
	must.Len(t, 121, pts)
	must.True(t, pts[0].At.Equal(last.Add(-time.Hour)))
	must.True(t, pts[120].At.Equal(last))
	must.EqOp(t, 99.0, pts[120].Value) // 299 % 100
	job := s.Job(JobKey{"default", "train"}, last)
	must.Len(t, 121, job)
	must.EqOp(t, 299.0, job[120].Value)
	// read later, only what is within the hour before
	must.Len(t, 61, s.GPU("GPU-a", last.Add(30*time.Minute)))

	st, ok := s.Latest("GPU-a")
	must.True(t, ok)
	must.True(t, st.At.Equal(last))
	must.EqOp(t, 100.0, st.PowerW)

	// a GPU and a job not seen for an hour are forgotten
	s.Record(last.Add(time.Hour+time.Second), map[string]gpumap.Stats{"GPU-b": {}}, nil)
	_, ok = s.Latest("GPU-a")
	must.False(t, ok)
	must.Eq(t, []string{"GPU-b"}, s.GPUs())
	must.SliceEmpty(t, s.Jobs())
}

// A very short interval is still bounded by MaxPoints.
func TestStoreSizeBounded(t *testing.T) {
	must.EqOp(t, MaxPoints, New(time.Hour, time.Second).Size())
	must.EqOp(t, MaxPoints, New(time.Hour, 0).Size())
}

func i64(v int64) *int64 { return &v }

// A round reads each GPU's counters from its shares, and a job's use is
// its processes' SM utilisation where reported, else the GPU's times the
// part of its shares held.
func TestRound(t *testing.T) {
	stat := func(util int64, proc *int64) *api.DeviceStats {
		a := map[string]*api.StatValue{
			statUtil:    {IntNumeratorVal: i64(util), IntDenominatorVal: i64(100)},
			statMemUsed: {IntNumeratorVal: i64(2048), IntDenominatorVal: i64(16384)},
			statPower:   {IntNumeratorVal: i64(120)},
		}
		if proc != nil {
			a[statProcessSM] = &api.StatValue{IntNumeratorVal: proc}
		}
		return &api.DeviceStats{Stats: &api.StatObject{Attributes: a}}
	}
	g := &api.DeviceGroupStats{Vendor: "nvidia", Type: "gpushare", InstanceStats: map[string]*api.DeviceStats{
		"GPU-a:0": stat(80, i64(30)), "GPU-a:1": stat(80, nil), "GPU-a:2": stat(80, nil), "GPU-a:3": stat(80, nil),
		"GPU-b:0": stat(40, nil), "GPU-b:1": stat(40, nil),
	}}
	other := &api.DeviceGroupStats{Vendor: "nvidia", Type: "gpushare-mig", InstanceStats: map[string]*api.DeviceStats{"MIG-x": stat(1, nil)}}
	r := NewRound()
	r.Add([]*api.DeviceGroupStats{g, other})
	must.MapLen(t, 2, r.GPUs)
	must.EqOp(t, 80.0, r.GPUs["GPU-a"].UtilizationPct)
	must.EqOp(t, 2048, r.GPUs["GPU-a"].MemoryUsedMiB)
	must.EqOp(t, 16384, r.GPUs["GPU-a"].MemoryTotalMiB)
	must.EqOp(t, 120.0, r.GPUs["GPU-a"].PowerW)
	must.EqOp(t, 4, r.PerGPU["GPU-a"])

	use, ok := r.Use([]string{"GPU-a:0", "GPU-b:0"})
	must.True(t, ok)
	must.EqOp(t, 30.0+20.0, use) // its processes on a; half of b's 40%
	use, ok = r.Use([]string{"GPU-a:1", "GPU-a:2"})
	must.True(t, ok)
	must.EqOp(t, 40.0, use) // half of a's 80%
	_, ok = r.Use([]string{"GPU-c:0"})
	must.False(t, ok)
}
