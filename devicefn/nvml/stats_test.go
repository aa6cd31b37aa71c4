package nvml

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

func TestStats(t *testing.T) {
	n := newDGXH100(t)
	for i, d := range n.devs {
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(5 * i)}, nvml.SUCCESS
		}
		d.MemoryInfo.Used = uint64(1024*i) * mib
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 312_499 + uint32(i), nvml.SUCCESS }
		d.GetTemperatureFunc = func(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
			if sensor != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return uint32(40 + i), nvml.SUCCESS
		}
	}
	src := n.source(t, Options{})

	stats, err := src.Stats(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 8, stats)
	for i, st := range stats {
		watts := uint32(312)
		if i > 0 {
			watts = 313 // 312.5 W and up round up
		}
		must.Eq(t, devicefn.Stats{
			UUID:                 n.devs[i].UUID,
			UtilizationPct:       uint32(10 * i),
			MemoryUtilizationPct: uint32(5 * i),
			MemoryUsedMiB:        uint64(1024 * i),
			MemoryTotalMiB:       81920,
			PowerWatts:           watts,
			TemperatureC:         uint32(40 + i),
			Timestamp:            n.clock.Now(),
		}, st)
	}
}

func TestStats_partial(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(n *testNode)
		check  func(t *testing.T, n *testNode, stats []devicefn.Stats)
	}{
		{
			name: "power not supported is zero",
			break_: func(n *testNode) {
				n.devs[0].GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			},
			check: func(t *testing.T, n *testNode, stats []devicefn.Stats) {
				must.SliceLen(t, 8, stats)
				must.Eq(t, 0, stats[0].PowerWatts)
				must.Eq(t, 81920, stats[0].MemoryTotalMiB)
			},
		},
		{
			name: "utilization not supported in MIG mode is zero",
			break_: func(n *testNode) {
				n.devs[2].GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
					return nvml.Utilization{Gpu: 99}, nvml.ERROR_NOT_SUPPORTED
				}
				n.devs[2].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
			},
			check: func(t *testing.T, n *testNode, stats []devicefn.Stats) {
				must.SliceLen(t, 8, stats)
				must.Eq(t, 0, stats[2].UtilizationPct)
				must.Eq(t, 0, stats[2].TemperatureC)
			},
		},
		{
			name: "lost gpu is left out",
			break_: func(n *testNode) {
				n.devs[3].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
			},
			check: func(t *testing.T, n *testNode, stats []devicefn.Stats) {
				must.SliceLen(t, 7, stats)
				for _, st := range stats {
					must.NotEq(t, n.devs[3].UUID, st.UUID)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newDGXH100(t)
			tc.break_(n)
			stats, err := n.source(t, Options{}).Stats(context.Background())
			must.NoError(t, err)
			tc.check(t, n, stats)
		})
	}
}
