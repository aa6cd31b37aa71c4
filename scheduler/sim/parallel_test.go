package sim

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParallel(t *testing.T) {
	var ran atomic.Int64
	seen := 0
	err := Parallel(context.Background(), 50, 3, func(int) error { ran.Add(1); return nil }, func(_, done int) { seen = done })
	must.NoError(t, err)
	must.Eq(t, int64(50), ran.Load())
	must.Eq(t, 50, seen)

	boom := errors.New("boom")
	err = Parallel(context.Background(), 10, 2, func(i int) error {
		if i == 7 || i == 3 {
			return boom
		}
		return nil
	}, nil)
	must.ErrorIs(t, err, boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	must.ErrorIs(t, Parallel(ctx, 10, 2, func(int) error { return nil }, nil), context.Canceled)
}
