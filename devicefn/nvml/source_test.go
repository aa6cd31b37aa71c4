package nvml

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/shoenig/test/must"

	"github.com/gpushare/gpushare/devicefn"
)

func TestUnavailable(t *testing.T) {
	cases := []struct {
		name string
		init func() nvml.Return
		want string
	}{
		{
			name: "library not found",
			init: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
			want: "NVML library not found: is the NVIDIA driver installed?",
		},
		{
			name: "dlopen panics",
			init: func() nvml.Return { panic("dlopen: libnvidia-ml.so.1: cannot open shared object file") },
			want: "NVML library could not be loaded (dlopen: libnvidia-ml.so.1",
		},
		{
			name: "driver not loaded",
			init: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED },
			want: "NVIDIA kernel driver not loaded",
		},
		{
			name: "no permission",
			init: func() nvml.Return { return nvml.ERROR_NO_PERMISSION },
			want: "no permission to use NVML",
		},
		{
			name: "driver mismatch",
			init: func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH },
			want: "versions differ",
		},
		{
			name: "other",
			init: func() nvml.Return { return nvml.ERROR_UNKNOWN },
			want: "NVML init failed",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lib := &mock.Interface{InitFunc: tc.init}
			logger, logs := newLogger()
			src := New(Options{NVML: lib, Logger: logger})
			ctx := context.Background()

			_, err := src.Inventory(ctx)
			must.ErrorIs(t, err, devicefn.ErrUnavailable)
			must.StrContains(t, err.Error(), tc.want)
			_, err = src.Health(ctx)
			must.ErrorIs(t, err, devicefn.ErrUnavailable)
			_, err = src.Stats(ctx)
			must.ErrorIs(t, err, devicefn.ErrUnavailable)

			must.SliceLen(t, 3, lib.InitCalls(), must.Sprint("init is retried on every use"))
			must.Eq(t, 1, logs.count("[WARN]  nvml: cannot use NVML; reporting no GPUs"), must.Sprint("and logged once"))
			must.NoError(t, src.Close(), must.Sprint("nothing to shut down"))
		})
	}
}

// Once the driver appears, a source that could not start works.
func TestUnavailable_thenAvailable(t *testing.T) {
	n := newDGXA100(t)
	n.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	src := n.source(t, Options{})
	_, err := src.Inventory(context.Background())
	must.ErrorIs(t, err, devicefn.ErrUnavailable)

	n.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	inv, err := src.Inventory(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 8, inv.GPUs)
}

// On this machine (no GPU) the real library is missing; on a GPU machine
// it works. Either way the source must not crash.
func TestRealLibrary(t *testing.T) {
	src := New(Options{})
	defer src.Close()
	inv, err := src.Inventory(context.Background())
	if err != nil {
		must.ErrorIs(t, err, devicefn.ErrUnavailable)
		t.Logf("no NVML here: %v", err)
		return
	}
	must.NoError(t, inv.Validate())
}

func TestEnumerateFailure(t *testing.T) {
	n := newDGXA100(t)
	n.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	src := n.source(t, Options{})
	_, err := src.Inventory(context.Background())
	must.ErrorIs(t, err, devicefn.ErrUnavailable)
	must.ErrorIs(t, err, nvml.ERROR_UNKNOWN)
	must.SliceLen(t, 1, n.ShutdownCalls(), must.Sprint("a half-done init is undone"))
}

func TestClose(t *testing.T) {
	n := newDGXA100(t)
	src := New(Options{NVML: n.Server})
	must.Eq(t, "nvml", src.Name())
	_, err := src.Health(context.Background())
	must.NoError(t, err)
	must.SliceLen(t, 1, n.InitCalls())

	must.NoError(t, src.Close())
	must.NoError(t, src.Close())
	must.Eq(t, 1, n.events.freed)
	must.SliceLen(t, 1, n.ShutdownCalls())

	_, err = src.Inventory(context.Background())
	must.ErrorIs(t, err, errClosed)
	must.SliceLen(t, 1, n.InitCalls(), must.Sprint("no re-init after close"))
}

func TestClose_neverUsed(t *testing.T) {
	n := newDGXA100(t)
	must.NoError(t, New(Options{NVML: n.Server}).Close())
	must.SliceLen(t, 0, n.InitCalls())
	must.SliceLen(t, 0, n.ShutdownCalls())
}

func TestClose_errors(t *testing.T) {
	n := newDGXA100(t)
	n.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	src := New(Options{NVML: n.Server})
	_, err := src.Stats(context.Background())
	must.NoError(t, err)
	err = src.Close()
	must.ErrorIs(t, err, nvml.ERROR_UNKNOWN)
	must.StrContains(t, err.Error(), "shut down NVML")
}

// A panic inside NVML (here a mock function left unset) is an error.
func TestPanicIsAnError(t *testing.T) {
	n := newDGXA100(t)
	n.devs[2].GetNumaNodeIdFunc = nil
	src := n.source(t, Options{})
	_, err := src.Inventory(context.Background())
	must.ErrorContains(t, err, "unexpected panic in the NVML library")
	_, err = src.Health(context.Background())
	must.NoError(t, err, must.Sprint("the source still works"))
}

func TestConcurrentUse(t *testing.T) {
	n := newDGXA100(t)
	src := n.source(t, Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for range 10 {
		wg.Add(3)
		go func() { defer wg.Done(); _, err := src.Inventory(ctx); errs <- err }()
		go func() { defer wg.Done(); _, err := src.Health(ctx); errs <- err }()
		go func() { defer wg.Done(); _, err := src.Stats(ctx); errs <- err }()
	}
	n.events.push(xid(n.devs[0], 79))
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	must.NoError(t, errors.Join(all...))
	must.SliceLen(t, 1, n.InitCalls())
}

func BenchmarkInventory(b *testing.B) {
	n := newDGXH100(b)
	src := n.source(b, Options{})
	ctx := context.Background()
	if _, err := src.Inventory(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Inventory(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
