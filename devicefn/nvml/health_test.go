package nvml

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

// unhealthy returns the reasons of the unhealthy GPUs by NVML index.
func unhealthy(t *testing.T, s *Source) map[int]string {
	t.Helper()
	hs, err := s.Health(context.Background())
	must.NoError(t, err)
	out := map[int]string{}
	for i, h := range hs {
		must.Eq(t, h.Healthy, h.Reason == "", must.Sprintf("gpu %d: %+v", i, h))
		if !h.Healthy {
			out[i] = h.Reason
		}
	}
	return out
}

func TestHealth_xid(t *testing.T) {
	cases := []struct {
		name   string
		opts   Options
		events func(n *testNode) []nvml.EventData
		want   map[int]string
	}{
		{
			name:   "no events",
			events: func(*testNode) []nvml.EventData { return nil },
			want:   map[int]string{},
		},
		{
			name:   "critical xid",
			events: func(n *testNode) []nvml.EventData { return []nvml.EventData{xid(n.devs[2], 79)} },
			want:   map[int]string{2: "XID 79: GPU has fallen off the bus"},
		},
		{
			name:   "unknown critical xid",
			events: func(n *testNode) []nvml.EventData { return []nvml.EventData{xid(n.devs[0], 150)} },
			want:   map[int]string{0: "XID 150: critical error (see NVIDIA's XID catalogue)"},
		},
		{
			name: "application xids are ignored",
			events: func(n *testNode) []nvml.EventData {
				var es []nvml.EventData
				for i, x := range []uint64{13, 31, 43, 45, 68, 109} {
					es = append(es, xid(n.devs[i], x))
				}
				return es
			},
			want: map[int]string{},
		},
		{
			name:   "ignored by option",
			opts:   Options{IgnoredXIDs: []uint64{63}},
			events: func(n *testNode) []nvml.EventData { return []nvml.EventData{xid(n.devs[1], 63), xid(n.devs[4], 48)} },
			want:   map[int]string{4: "XID 48: Double Bit ECC Error"},
		},
		{
			name: "latest xid gives the reason",
			events: func(n *testNode) []nvml.EventData {
				return []nvml.EventData{xid(n.devs[7], 48), xid(n.devs[7], 13), xid(n.devs[7], 94)}
			},
			want: map[int]string{7: "XID 94: Contained ECC error"},
		},
		{
			name: "other event types are not xids",
			events: func(n *testNode) []nvml.EventData {
				return []nvml.EventData{{Device: n.devs[0], EventType: nvml.EventTypeSingleBitEccError, EventData: 79}}
			},
			want: map[int]string{},
		},
		{
			name: "event without a device suspects every gpu",
			events: func(n *testNode) []nvml.EventData {
				return []nvml.EventData{{EventType: nvml.EventTypeXidCriticalError, EventData: 79}}
			},
			want: allGPUs(8, "XID 79: GPU has fallen off the bus"),
		},
		{
			name: "event from a gpu without a readable uuid suspects every gpu",
			events: func(n *testNode) []nvml.EventData {
				return []nvml.EventData{xid(unreadableGPU(), 48)}
			},
			want: allGPUs(8, "XID 48: Double Bit ECC Error"),
		},
		{
			name: "application xid from an unknown gpu is still ignored",
			events: func(n *testNode) []nvml.EventData {
				return []nvml.EventData{xid(unreadableGPU(), 31), xid(nil, 43)}
			},
			want: map[int]string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newDGXA100(t)
			src := n.source(t, tc.opts)
			must.MapEmpty(t, unhealthy(t, src), must.Sprint("healthy before any event"))
			n.events.push(tc.events(n)...)
			must.Eq(t, tc.want, unhealthy(t, src))
		})
	}
}

func TestHealth_xidRecovery(t *testing.T) {
	cases := []struct {
		name     string
		recovery time.Duration
		healthy  time.Duration // when the GPU is healthy again; 0 = never
	}{
		{name: "default five minutes", recovery: 0, healthy: DefaultXIDRecovery},
		{name: "configured", recovery: time.Minute, healthy: time.Minute},
		{name: "never", recovery: -1, healthy: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newDGXH100(t)
			src := n.source(t, Options{XIDRecovery: tc.recovery})
			const reason = "XID 79: GPU has fallen off the bus"

			n.events.push(xid(n.devs[1], 79))
			must.Eq(t, map[int]string{1: reason}, unhealthy(t, src))

			window := tc.healthy
			if window == 0 {
				window = time.Hour
			}
			// A new critical XID half way restarts the window.
			n.clock.Advance(window / 2)
			n.events.push(xid(n.devs[1], 79))
			must.Eq(t, map[int]string{1: reason}, unhealthy(t, src))
			n.clock.Advance(window - time.Second)
			must.Eq(t, map[int]string{1: reason}, unhealthy(t, src))

			n.clock.Advance(time.Second)
			if tc.healthy == 0 {
				must.Eq(t, map[int]string{1: reason}, unhealthy(t, src))
				n.clock.Advance(24 * time.Hour)
				must.Eq(t, map[int]string{1: reason}, unhealthy(t, src))
				return
			}
			must.MapEmpty(t, unhealthy(t, src))
		})
	}
}

// After the XID window a GPU recovers only once its queries succeed.
func TestHealth_xidRecoveryNeedsWorkingGPU(t *testing.T) {
	n := newDGXH100(t)
	src := n.source(t, Options{})
	n.events.push(xid(n.devs[0], 79))
	must.Eq(t, map[int]string{0: "XID 79: GPU has fallen off the bus"}, unhealthy(t, src))

	n.devs[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	n.clock.Advance(DefaultXIDRecovery)
	must.Eq(t, map[int]string{0: ReasonGPULost}, unhealthy(t, src))

	n.devs[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return n.devs[0].MemoryInfo, nvml.SUCCESS }
	must.MapEmpty(t, unhealthy(t, src))
}

func TestHealth_lostGPU(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(n *testNode) (restore func())
		want   string // prefix of the reason
	}{
		{
			name: "memory info",
			break_: func(n *testNode) func() {
				n.devs[4].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
				return func() {
					n.devs[4].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return n.devs[4].MemoryInfo, nvml.SUCCESS }
				}
			},
			want: "GPU is lost (NVML ERROR_GPU_IS_LOST)",
		},
		{
			name: "handle by uuid",
			break_: func(n *testNode) func() {
				byUUID := n.DeviceGetHandleByUUIDFunc
				n.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
					if uuid == n.devs[4].UUID {
						return nil, nvml.ERROR_GPU_IS_LOST
					}
					return byUUID(uuid)
				}
				return func() { n.DeviceGetHandleByUUIDFunc = byUUID }
			},
			want: "GPU is lost (NVML ERROR_GPU_IS_LOST)",
		},
		{
			name: "other query error",
			break_: func(n *testNode) func() {
				n.devs[4].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
				return func() {
					n.devs[4].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return n.devs[4].MemoryInfo, nvml.SUCCESS }
				}
			},
			want: "NVML cannot query the GPU: ",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newDGXA100(t)
			logger, logs := newLogger()
			src := n.source(t, Options{Logger: logger})
			must.MapEmpty(t, unhealthy(t, src))

			restore := tc.break_(n)
			for range 2 {
				got := unhealthy(t, src)
				must.MapLen(t, 1, got)
				must.StrHasPrefix(t, tc.want, got[4])
			}
			must.Eq(t, 1, logs.count("[WARN]  nvml: marking GPU unhealthy"), must.Sprint("transitions are logged once"))

			restore()
			must.MapEmpty(t, unhealthy(t, src), must.Sprint("a lost GPU recovers when its queries succeed"))
			must.Eq(t, 1, logs.count("[INFO]  nvml: marking GPU healthy again"))
		})
	}
}

func TestHealth_registration(t *testing.T) {
	n := newDGXA100(t)
	n.devs[0].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	n.devs[1].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
	logger, logs := newLogger()
	src := n.source(t, Options{Logger: logger})

	for range 3 {
		must.MapEmpty(t, unhealthy(t, src))
	}
	n.events.push(xid(n.devs[5], 79))
	must.Eq(t, map[int]string{5: "XID 79: GPU has fallen off the bus"}, unhealthy(t, src))
	must.Eq(t, 1, logs.count("no XID events from GPU"))
	must.Eq(t, 1, logs.count("cannot register GPU for XID events"))

	for _, d := range n.devs {
		calls := d.RegisterEventsCalls()
		must.SliceLen(t, 1, calls)
		must.Eq(t, uint64(nvml.EventTypeXidCriticalError), calls[0].V)
	}
}

// Without any GPU that delivers XIDs, health comes from queries alone.
func TestHealth_noEvents(t *testing.T) {
	n := newDGXA100(t)
	for _, d := range n.devs {
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	}
	src := n.source(t, Options{})
	must.MapEmpty(t, unhealthy(t, src))
	must.Eq(t, 1, n.events.freed, must.Sprint("the unused event set is freed"))

	n.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	must.MapEmpty(t, unhealthy(t, n.source(t, Options{})))
}

// An event storm is drained over several polls, never in one unbounded loop.
func TestHealth_eventStorm(t *testing.T) {
	n := newDGXA100(t)
	src := n.source(t, Options{})
	must.MapEmpty(t, unhealthy(t, src))
	n.EventSetCreateFunc = nil
	src.events = &mock.EventSet{WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
		return xid(n.devs[0], 13), nvml.SUCCESS
	}, FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	must.MapEmpty(t, unhealthy(t, src))
}

func TestHealth_cancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newDGXA100(t).source(t, Options{}).Health(ctx)
	must.ErrorIs(t, err, context.Canceled)
}

func TestHealth_allGPUsInOrder(t *testing.T) {
	n := newDGXH100(t)
	hs, err := n.source(t, Options{}).Health(context.Background())
	must.NoError(t, err)
	want := make([]devicefn.Health, len(n.devs))
	for i, d := range n.devs {
		want[i] = devicefn.Health{UUID: d.UUID, Healthy: true}
	}
	must.Eq(t, want, hs)
}

func allGPUs(n int, reason string) map[int]string {
	m := make(map[int]string, n)
	for i := range n {
		m[i] = reason
	}
	return m
}

// unreadableGPU is an event's device whose UUID NVML cannot read.
func unreadableGPU() nvml.Device {
	return &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}
}
