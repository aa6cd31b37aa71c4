package interposer

import (
	"fmt"
	"testing"
)

// A mipmapped array is charged over all its levels, each halving width,
// height and depth: 1024x1024 floats over 11 levels are 4 x (1 + 1/4 + ...
// + 1/4^10) MiB = 5,592,404 bytes, so a 6 MiB allocation no longer fits
// under a 10 MiB cap (were only the first level charged, 4 MiB, it would);
// cuMipmappedArrayDestroy gives the charge back. For each way a program
// finds the driver's functions.
func TestMipmappedArrayIsCharged(t *testing.T) {
	b := build(t)
	const levels = 5592404
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := run{limits: reservation(t, capOf(10*mib)), program: b.prog(m.prog), mode: m.name}
			got := r.output(t, b, "mipmap:1024:1024:0:11", "info", "fake", "alloc:6291456", "free:0", "alloc:6291456", "fake")
			check(t, got,
				"mipmap 0",
				fmt.Sprintf("info 0 %d %d", 10*mib-levels, 10*mib),
				fmt.Sprintf("fake 0 %d", levels), // the fake driver holds what was charged
				"alloc 2", "free 0", "alloc 0", "fake 0 6291456")
		})
	}
}

// The level count is clamped as the driver clamps it, to [1, 1 + log2 of
// the largest extent]; a 3D array halves its depth too; an estimate that
// overflows is refused.
func TestMipmappedArrayEstimate(t *testing.T) {
	b := build(t)
	cases := []struct {
		name, cmd string
		bytes     int
	}{
		{"levels-clamped-above", "mipmap:1024:1024:0:100", 5592404},
		{"zero-levels-is-one", "mipmap:1024:1024:0:0", 4 * mib},
		// 64x32x16, 32x16x8, 16x8x4, 8x4x2, 4x2x1, 2x1x1, 1x1x1 floats
		{"3d", "mipmap:64:32:16:7", 4 * (32768 + 4096 + 512 + 64 + 8 + 2 + 1)},
		{"1d", "mipmap:1000:0:0:3", 4 * (1000 + 500 + 250)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run{limits: reservation(t, capOf(10*mib)), program: b.dyn, mode: "dlsym"}
			check(t, r.output(t, b, c.cmd, "info", "fake"),
				"mipmap 0", fmt.Sprintf("info 0 %d %d", 10*mib-c.bytes, 10*mib), fmt.Sprintf("fake 0 %d", c.bytes))
		})
	}
	t.Run("overflow", func(t *testing.T) {
		r := run{limits: reservation(t, capOf(10*mib)), program: b.dyn, mode: "dlsym"}
		check(t, r.output(t, b, "mipmap:4294967296:4294967296:4294967296:1", "fake"), "mipmap 2", "fake 0 0")
	})
}
